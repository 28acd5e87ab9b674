--[[ includes/keyed.lua — the key index (docs/architecture.md, "Jobs by key"): which of a
shard's pending jobs carry each key, so a key's jobs are found in O(its jobs). A key of few
jobs (most keys) costs a 20-byte record a job in a shared bucket; a key of many has a list.
  {T:s}:keyed  HASH
    '\0'         the buckets' state, 'level split records': linear hashing, 2^level + split
                 buckets, a key's bucket its hash mod 2^level (mod 2^(level+1) below split);
                 split in two while they hold over WQ_KEYED_LOAD records each on average,
                 merged again below a quarter of it
    '\0' .. n    bucket n: a record per pending member of a small key, end to end: the key's
                 hash (4 bytes, wq_keyed_hash) and a generated id's 16 bytes (wq_id_codec), or
                 the hash plus 2^31, a byte (the id's length - 1) and the id
    <key>        a listed key's count: how many pending members of its jobs (first attempts
                 and retries; in the sorted set, the far tier or on the due line) the shard
                 holds, as the scripts that write and remove them count
  {T:s}:keyed:<key>  LIST  a listed key's entries, one per job noted under it, in no order: a
                     generated id's 16 bytes, any other id after one or two bytes 1
A key is small or listed, never both. A small key's records are exact: each member noted adds
one, each that leaves cuts one. A bucket grown past WQ_KEYED_BUCKET_BYTES lists each key noted
into it that holds WQ_KEYED_SPILL records or more there: its records move to a list of its
own, and stay there until it has no job left. A list's entries may outlive their jobs and go
lazily: as a key's jobs leave, entries are taken from its list's head while it holds over a
quarter more entries than its count (one still pending goes back at the tail, another is
dropped), so a list stays within about 1.25 times its count; when the count reaches 0 the list
is read (up to WQ_KEYED_CHECK entries) and deleted if none of it is pending. A count is only a
hint and that check is what deletes: a job written before the index (never noted, but counted
down as it leaves) cannot take another job's entry with it.
Includes: base, envelope, far_tier, ids
]]
-- Records a bucket holds on average before one is split in two (about 1.3 KB).
local WQ_KEYED_LOAD = 64
-- A bucket's size past which keys noted into it with WQ_KEYED_SPILL records are listed.
local WQ_KEYED_BUCKET_BYTES = 8192
local WQ_KEYED_SPILL = 64
-- Entries a key's list is read at most when its count reaches 0 (a few ms of Redis).
local WQ_KEYED_CHECK = 2000
local WQ_KEYED_OWN = 2147483648 -- 2^31: a record's hash flag for an id not generated

-- The id an entry of a key's list names.
local function wq_keyed_id(entry, text)
  if #entry == 16 then
    return text(entry)
  end
  return string.match(entry, '^\1+(.*)$')
end

-- A list entry for `id`: its 16 bytes, or bytes 1 and the id (never 16 bytes long).
local function wq_keyed_entry(id, bytes)
  local raw = bytes(id)
  if raw then
    return raw
  end
  return (#id == 15 and '\1\1' or '\1') .. id
end

-- A key's 31-bit hash: its bucket, and the head of its records.
local function wq_keyed_hash(key)
  return tonumber(string.sub(redis.sha1hex(key), 1, 8), 16) % WQ_KEYED_OWN
end

-- A record of `id` under a key of hash `h` (`head`: struct.pack('>I4', h), made once a key).
local function wq_keyed_record(h, head, id, bytes)
  local raw = bytes(id)
  if raw then
    return head .. raw
  end
  return struct.pack('>I4B', h + WQ_KEYED_OWN, #id - 1) .. id
end

-- The records of `value` (a bucket) whose hash is `h` (nil: every one), in order: a list of
-- {at, size, id, hash} (at: the record's first byte; id: decoded by `text`, wq_id_codec's, or
-- nil without it).
local function wq_keyed_scan(value, h, text)
  local out, at = {}, 1
  while at <= #value do
    local head = struct.unpack('>I4', value, at)
    local size, id_at, own = 20, at + 4, head >= WQ_KEYED_OWN
    if own then
      head = head - WQ_KEYED_OWN
      size = 6 + string.byte(value, at + 4)
      id_at = at + 5
    end
    if h == nil or head == h then
      local id = nil
      if text then
        id = string.sub(value, id_at, at + size - 1)
        if not own then
          id = text(id)
        end
      end
      out[#out + 1] = {at, size, id, head}
    end
    at = at + size
  end
  return out
end

-- `value` without the records at `cut` ({at, size} each, in order).
local function wq_keyed_without(value, cut)
  if #cut == 0 then
    return value
  end
  local parts, from = {}, 1
  for _, r in ipairs(cut) do
    parts[#parts + 1] = string.sub(value, from, r[1] - 1)
    from = r[1] + r[2]
  end
  parts[#parts + 1] = string.sub(value, from)
  return table.concat(parts)
end

-- The buckets' state of `keyed`, read once: {level, split, records}; `bucket(h)` names the
-- bucket field of a hash, `put(field, value)` writes a bucket, `save()` splits or merges
-- buckets as their records ask and writes the state back (or deletes it once empty).
local function wq_keyed_buckets(keyed, raw)
  if raw == nil then
    raw = redis.call('HGET', keyed, '\0')
  end
  local level, split, records = 0, 0, 0
  if raw then
    level, split, records = string.match(raw, '^(%d+) (%d+) (%d+)$')
    level, split, records = tonumber(level), tonumber(split), tonumber(records)
  end
  local b = {level = level, split = split, records = records}
  function b.bucket(h)
    local at = h % 2 ^ b.level
    if at < b.split then
      at = h % 2 ^ (b.level + 1)
    end
    return '\0' .. at
  end
  function b.put(field, value) -- a bucket written, or deleted once empty
    if value == '' then
      redis.call('HDEL', keyed, field)
    else
      redis.call('HSET', keyed, field, value)
    end
  end
  -- Bucket `split` in two (its records whose hash mod 2^(level+1) is the new one move).
  local function grow()
    local low = b.split
    local high = low + 2 ^ b.level
    local value = redis.call('HGET', keyed, '\0' .. low) or ''
    local stay, move, at, modulus = {}, {}, 1, 2 ^ (b.level + 1)
    while at <= #value do
      local h = struct.unpack('>I4', value, at)
      local size = 20
      if h >= WQ_KEYED_OWN then
        h, size = h - WQ_KEYED_OWN, 6 + string.byte(value, at + 4)
      end
      local part = string.sub(value, at, at + size - 1)
      if h % modulus == low then
        stay[#stay + 1] = part
      else
        move[#move + 1] = part
      end
      at = at + size
    end
    b.put('\0' .. low, table.concat(stay))
    b.put('\0' .. high, table.concat(move))
    b.split = b.split + 1
    if b.split == 2 ^ b.level then
      b.level, b.split = b.level + 1, 0
    end
  end
  -- The last split undone: its new bucket's records go back.
  local function shrink()
    if b.split == 0 then
      b.level = b.level - 1
      b.split = 2 ^ b.level
    end
    b.split = b.split - 1
    local low = '\0' .. b.split
    local high = '\0' .. (b.split + 2 ^ b.level)
    local value = (redis.call('HGET', keyed, low) or '') .. (redis.call('HGET', keyed, high) or '')
    redis.call('HDEL', keyed, high)
    b.put(low, value)
  end
  function b.save()
    local count = 2 ^ b.level + b.split
    while b.records > WQ_KEYED_LOAD * count do
      grow()
      count = count + 1
    end
    while count > 1 and b.records * 4 < WQ_KEYED_LOAD * count do
      shrink()
      count = count - 1
    end
    if b.records == 0 and count == 1 then
      redis.call('HDEL', keyed, '\0')
    else
      redis.call('HSET', keyed, '\0', string.format('%d %d %d', b.level, b.split, b.records))
    end
  end
  return b
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

-- The keys of `id`'s pending members in the shard, one at a time to visit(key) until it
-- answers true (then true): its envelope in the hash (the sorted set's jobs and retries
-- under their id, the due line's), a retry under an alias member, or a far job (`far`:
-- wq_far_state's table, or the far tier's meta key, read on first need; `retries` nil: the
-- caller writes no retries). A member without a key is not visited. An id with no member
-- left costs an HGET: the retries and the far tier are asked only while they hold anything
-- (read once a call).
local function wq_keyed_members(jobs, retries, far)
  local has_retries = nil
  return function(id, visit)
    local key = wq_key_of(redis.call('HGET', jobs, id))
    if key and visit(key) then
      return true
    end
    if has_retries == nil then
      has_retries = retries ~= nil and redis.call('ZCARD', retries) > 0
    end
    if has_retries then
      local aliases = redis.call('ZRANGE', retries, '[' .. id .. '\31', '(' .. id .. '\32',
        'BYLEX')
      for _, alias in ipairs(aliases) do
        key = wq_key_of(redis.call('HGET', jobs, alias))
        if key and visit(key) then
          return true
        end
      end
    end
    if type(far) == 'string' then
      far = wq_far_state(far, nil)
    end
    local found = far.entries > 0 and far:find(id)
    key = found and wq_key_of(found.envelope)
    return key and visit(key) or false
  end
end

-- Whether `id` has a pending member of `key` in the shard (wq_keyed_members' arguments): an
-- id pending under another key (written over since) has not.
local function wq_keyed_live(jobs, retries, far)
  local members = wq_keyed_members(jobs, retries, far)
  return function(id, key)
    return members(id, function(k) return k == key end)
  end
end

-- One key's entries on the shard, read or taken: {ids, more, hash}. Read (`take` false): the
-- ids from index `from`, at most `count`, and more: whether any follow. Taken: up to `count`
-- ids from the head, removed from the index (an entry taken is done with: the caller removes
-- its job or finds it no longer the key's), more: whether any are left; a small key's records
-- leave the count of `buckets` (wq_keyed_buckets', saved by the caller), and hash is its hash
-- (nil: a listed key): a record of another key of the same hash may be taken with them, to
-- be noted again (wq_keyed's keep). An id may be named twice, or be pending under another
-- key since.
local function wq_keyed_entries(keyed, key, from, count, take, buckets)
  local _, text = wq_id_codec()
  local list = keyed .. ':' .. key
  if redis.call('HEXISTS', keyed, key) == 1 then
    local entries
    if take then
      entries = redis.call('LPOP', list, count) or {}
    else
      entries = redis.call('LRANGE', list, from, from + count - 1)
    end
    local ids = {}
    for i, entry in ipairs(entries) do
      ids[i] = wq_keyed_id(entry, text)
    end
    if take then
      return ids, redis.call('EXISTS', list) == 1, nil
    end
    return ids, #entries == count, nil
  end
  buckets = buckets or wq_keyed_buckets(keyed, nil)
  local h = wq_keyed_hash(key)
  local field = buckets.bucket(h)
  local value = redis.call('HGET', keyed, field) or ''
  local records = wq_keyed_scan(value, h, text)
  local first = take and 1 or from + 1
  local ids, cut = {}, {}
  for i = first, math.min(#records, first + count - 1) do
    ids[#ids + 1] = records[i][3]
    cut[#cut + 1] = records[i]
  end
  local more = first - 1 + count < #records
  if take and #cut > 0 then
    buckets.put(field, wq_keyed_without(value, cut))
    buckets.records = buckets.records - #cut
    buckets.taken = true
  end
  return ids, more, h
end

-- A call's changes to the key index, written at its end by apply(live): note(key, id) as a
-- member of `key`'s job `id` becomes pending (a first attempt, a retry), gone(key, member)
-- as one leaves (fired, cancelled, dropped, written over by another key's; a retry's alias
-- member names its id); `live(id, key)`: whether an id is still pending under the key
-- (wq_keyed_live). take(key, count): a key's entries taken at once (wq_keyed_entries);
-- keep(ids, members): of the ids a take handed out, those the caller left pending (in
-- another key's job of the same hash) are noted again, each member (wq_keyed_members) of a
-- key of that hash. A job without a key is never noted.
local function wq_keyed(keyed)
  local index, keys, changes, n = {}, {}, {}, 0
  local buckets = nil -- the buckets' state (wq_keyed_buckets), read at the first need
  local function touch(key)
    local c = changes[key]
    if c == nil then
      n = n + 1
      keys[n], c = key, {added = {}, gone = {}}
      changes[key] = c
    end
    return c
  end
  function index.note(key, id)
    local added = touch(key).added
    added[#added + 1] = id
  end
  function index.gone(key, member)
    local gone = touch(key).gone
    gone[#gone + 1] = string.match(member, '^[^\31]*')
  end
  local taken_hash = nil -- the hash of the small key a take took records of
  function index.take(key, count)
    buckets = buckets or wq_keyed_buckets(keyed, nil)
    local ids, more
    ids, more, taken_hash = wq_keyed_entries(keyed, key, 0, count, true, buckets)
    return ids, more
  end
  function index.keep(ids, members)
    if taken_hash == nil then
      return -- a list's entry left is stale: dropped
    end
    for _, id in ipairs(ids) do
      members(id, function(key)
        if wq_keyed_hash(key) == taken_hash then
          index.note(key, id)
        end
        return false
      end)
    end
  end

  -- A listed key's changes: its new entries, its count, and the list kept short.
  local function listed(key, count, c, live, bytes, text)
    local list, delta = keyed .. ':' .. key, #c.added - #c.gone
    if #c.added > 0 then
      local entries = {}
      for j, id in ipairs(c.added) do
        entries[j] = wq_keyed_entry(id, bytes)
      end
      wq_multi('RPUSH', list, entries)
    end
    if delta == 0 then
      return
    end
    count = redis.call('HINCRBY', keyed, key, delta)
    if delta < 0 and count <= 0 then
      -- Counted out: keep what is still pending (a job the index never noted may have been
      -- counted), else delete the list and its count. At most WQ_KEYED_CHECK entries are
      -- read: the rest count as pending (an upper bound, never a loss) and are passed over as
      -- the key's jobs leave.
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
      -- Jobs left: pass entries from the head (two a job that left, plus eight, so entries
      -- are dropped faster than jobs leave) while the list is over a quarter longer than its
      -- count.
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

  -- A small key's records moved to a list of its own (those of its jobs still pending; a
  -- record of another key of the same hash stays): `value` without them.
  local function spill(key, h, value, live, bytes, text)
    local entries, cut = {}, {}
    for _, r in ipairs(wq_keyed_scan(value, h, text)) do
      if live(r[3], key) then
        entries[#entries + 1] = wq_keyed_entry(r[3], bytes)
        cut[#cut + 1] = r
      end
    end
    if #entries == 0 then
      return value
    end
    wq_multi('RPUSH', keyed .. ':' .. key, entries)
    redis.call('HSET', keyed, key, #entries)
    buckets.records = buckets.records - #cut
    return wq_keyed_without(value, cut)
  end

  function index.apply(live)
    if n == 0 and buckets == nil then
      return
    end
    local bytes, text = wq_id_codec()
    local fields = {'\0'}
    for i = 1, n do
      fields[i + 1] = keys[i]
    end
    local got = wq_multi('HMGET', keyed, fields)
    buckets = buckets or wq_keyed_buckets(keyed, got[1] or nil)
    -- Small keys' records, a bucket at a time: {field = {adds, cuts, keys noted into it}}.
    local touched, order = {}, {}
    for i = 1, n do
      local key, c = keys[i], changes[keys[i]]
      if got[i + 1] then
        listed(key, tonumber(got[i + 1]), c, live, bytes, text)
      else
        local h = wq_keyed_hash(key)
        local head = struct.pack('>I4', h)
        local field = buckets.bucket(h)
        local t = touched[field]
        if t == nil then
          t = {adds = {}, cuts = {}, noted = {}}
          touched[field] = t
          order[#order + 1] = field
        end
        for _, id in ipairs(c.added) do
          t.adds[#t.adds + 1] = wq_keyed_record(h, head, id, bytes)
        end
        for _, id in ipairs(c.gone) do
          t.cuts[#t.cuts + 1] = wq_keyed_record(h, head, id, bytes)
        end
        if #c.added > 0 then
          t.noted[#t.noted + 1] = {key, h}
        end
      end
    end
    for _, field in ipairs(order) do
      local t = touched[field]
      local value = (redis.call('HGET', keyed, field) or '') .. table.concat(t.adds)
      buckets.records = buckets.records + #t.adds
      if #t.cuts <= 4 then -- a few: each found and cut out
        for _, record in ipairs(t.cuts) do
          local at = string.find(value, record, 1, true)
          if at then
            value = string.sub(value, 1, at - 1) .. string.sub(value, at + #record)
            buckets.records = buckets.records - 1
          end
        end
      else -- many (a batch fired or cancelled): one pass over the bucket
        local wanted, cut = {}, {}
        for _, record in ipairs(t.cuts) do
          wanted[record] = (wanted[record] or 0) + 1
        end
        for _, r in ipairs(wq_keyed_scan(value, nil, nil)) do
          local record = string.sub(value, r[1], r[1] + r[2] - 1)
          local left = wanted[record]
          if left and left > 0 then
            wanted[record] = left - 1
            cut[#cut + 1] = r
          end
        end
        value = wq_keyed_without(value, cut)
        buckets.records = buckets.records - #cut
      end
      if #value > WQ_KEYED_BUCKET_BYTES then
        for _, noted in ipairs(t.noted) do
          if #wq_keyed_scan(value, noted[2], nil) >= WQ_KEYED_SPILL then
            value = spill(noted[1], noted[2], value, live, bytes, text)
          end
        end
      end
      buckets.put(field, value)
    end
    if #order > 0 or buckets.taken then
      buckets.save()
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
      index.gone(old, id)
    end
    if new then
      index.note(new, id)
    end
    index.apply(live)
  end
end
