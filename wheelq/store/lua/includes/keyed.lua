--[[ includes/keyed.lua — the key index (docs/architecture.md, "Jobs by key"): which of a
shard's pending jobs carry each key, so a key's jobs are found in O(its jobs).
  {T:s}:keyed        HASH  key -> how many pending members of the key's jobs the shard holds
                           (first attempts and retries; in the sorted set, the far tier or on
                           the due line), as the scripts that write and remove them count
  {T:s}:keyed:<key>  LIST  an entry per job noted under the key, in no order: a generated id's
                           16 bytes (wq_id_codec), any other id as '\1' and its bytes
An entry may outlive its job: entries are removed lazily. As a key's jobs leave, entries are
taken from its list's head while it holds over a quarter more entries than its count (one
still pending goes back at the tail, another is dropped), so a list stays within about 1.25
times its count; when the count reaches 0 the list is read (up to WQ_KEYED_CHECK entries) and
deleted if none of it is pending. A count is only a hint and that check is what deletes: a
job written before the index (never noted, but counted down as it leaves) cannot take another
job's entry with it.
Includes: base, envelope, far_tier, ids
]]
-- The id an entry names.
local function wq_keyed_id(entry, text)
  if #entry == 16 then
    return text(entry)
  end
  return string.sub(entry, 2)
end

-- The key of a stored envelope (nil: none, or it does not decode). One of fewer than 10
-- fields (a msgpack fixarray's first byte, 0x90 + its length) has no key slot: not decoded.
local function wq_key_of(envelope)
  if not envelope or string.byte(envelope, 1) < 0x9a then
    return nil
  end
  local env = wq_envelope(envelope)
  local key = env and env[10]
  if type(key) == 'string' and key ~= '' then
    return key
  end
  return nil
end

-- Whether `id` has a pending member of `key` in the shard: its envelope in the hash (the
-- sorted set's jobs and retries under their id, the due line's), a retry under an alias
-- member, or a far job (`far`: wq_far_state's table, or the far tier's meta key, read on first
-- need; `retries` nil: the caller writes no retries). An id pending under another key (written
-- over since) is not. An entry whose job has left costs an HGET: the retries and the far tier
-- are asked only while they hold anything (read once a call).
local function wq_keyed_live(jobs, retries, far)
  local has_retries = nil
  return function(id, key)
    local envelope = redis.call('HGET', jobs, id)
    if envelope and wq_key_of(envelope) == key then
      return true
    end
    if has_retries == nil then
      has_retries = retries ~= nil and redis.call('ZCARD', retries) > 0
    end
    if has_retries then
      local aliases = redis.call('ZRANGE', retries, '[' .. id .. '\31', '(' .. id .. '\32',
        'BYLEX')
      for _, alias in ipairs(aliases) do
        if wq_key_of(redis.call('HGET', jobs, alias)) == key then
          return true
        end
      end
    end
    if type(far) == 'string' then
      far = wq_far_state(far, nil)
    end
    local found = far.entries > 0 and far:find(id)
    return found and wq_key_of(found.envelope) == key or false
  end
end

-- Entries a key's list is read at most when its count reaches 0 (a few ms of Redis).
local WQ_KEYED_CHECK = 2000

-- A call's changes to the key index, written at its end by apply(live): note(key, id) as a
-- job of `key` becomes pending (a new member: a first attempt, a retry), gone(key) as one
-- leaves (fired, cancelled, dropped, written over by another key's); `live(id, key)`:
-- whether an id is still pending under the key (wq_keyed_live). A job without a key is never
-- noted.
local function wq_keyed(keyed)
  local index, keys, deltas, adds, n = {}, {}, {}, {}, 0
  local function touch(key)
    if deltas[key] == nil then
      n = n + 1
      keys[n], deltas[key], adds[key] = key, 0, {}
    end
  end
  function index.note(key, id)
    touch(key)
    deltas[key] = deltas[key] + 1
    local added = adds[key]
    added[#added + 1] = id
  end
  function index.gone(key)
    touch(key)
    deltas[key] = deltas[key] - 1
  end
  function index.apply(live)
    if n == 0 then
      return
    end
    local bytes, text = wq_id_codec()
    for i = 1, n do
      local key = keys[i]
      local list, delta, added = keyed .. ':' .. key, deltas[key], adds[key]
      if #added > 0 then
        local entries = {}
        for j, id in ipairs(added) do
          entries[j] = bytes(id) or ('\1' .. id)
        end
        wq_multi('RPUSH', list, entries)
      end
      if delta ~= 0 then
        local count = redis.call('HINCRBY', keyed, key, delta)
        if delta < 0 and count <= 0 then
          -- Counted out: keep what is still pending (a job the index never noted may have
          -- been counted), else delete the list and its count. At most WQ_KEYED_CHECK
          -- entries are read: the rest count as pending (an upper bound, never a loss) and
          -- are passed over as the key's jobs leave.
          local length = redis.call('LLEN', list)
          local kept = {}
          for _, entry in ipairs(redis.call('LPOP', list, WQ_KEYED_CHECK) or {}) do
            if live(wq_keyed_id(entry, text), key) then
              kept[#kept + 1] = entry
            end
          end
          local rest = math.max(0, length - WQ_KEYED_CHECK)
          if #kept + rest > 0 then
            if #kept > 0 then
              wq_multi('RPUSH', list, kept)
            end
            redis.call('HSET', keyed, key, #kept + rest)
          else
            redis.call('HDEL', keyed, key)
          end
        elseif delta < 0 then
          -- Jobs left: pass entries from the head (two a job that left, plus eight, so
          -- entries are dropped faster than jobs leave) while the list is over a quarter
          -- longer than its count.
          local length = redis.call('LLEN', list)
          local over = length - count - math.floor(count / 4) - 8
          if over > 0 then
            for _ = 1, math.min(length, 2 * -delta + 8) do
              local entry = redis.call('LPOP', list)
              if not entry then
                break
              end
              if live(wq_keyed_id(entry, text), key) then
                redis.call('RPUSH', list, entry)
              end
            end
          end
        end
      end
    end
  end
  return index
end

-- A write over the job pending under `id` (`before`: its envelope then; nil or false: none)
-- that leaves `after` pending (an envelope; nil: it fired or left): the key index follows.
local function wq_keyed_replace(keyed, id, before, after, live)
  local old, new = wq_key_of(before), wq_key_of(after)
  if old ~= new then
    local index = wq_keyed(keyed)
    if old then
      index.gone(old)
    end
    if new then
      index.note(new, id)
    end
    index.apply(live)
  end
end
