--[[ includes/far_tier.lua — the far tier (docs/architecture.md, "The far tier";
wheelq.core.far_tier does the same arithmetic in Python). A shard's far tier hangs off its
meta hash KEYS {T:s}:far:
  {T:s}:far            HASH  'width': the narrowest leaf's span in ms, at most 65535
                             (60000 unless set while the tier is empty); 'level',
                             'split': the index's shape (linear hashing); 'entries': far
                             jobs (one index entry each); 'at': "leaf:position" promotion
                             has reached in the leaf it is promoting
  {T:s}:far:<leaf>     LIST  the leaf's records: the id (u8 length and its bytes, or 0 and
                             16 bytes: a generated id's 128 bits), the due ms into the
                             leaf (u16 at level 0, u24 at 1-2, u32 at 3-4), envelope (a record
                             whose index entry points elsewhere is dead: cancelled,
                             rescheduled or replaced)
  {T:s}:far:buckets    ZSET  leaf -> its start ms: the leaves, in time order
  {T:s}:far:live       HASH  leaf -> its live records (absent: none), so a count of the
                             far jobs due by a time reads whole leaves' counts
  {T:s}:far:ix:<n>     HASH  fingerprint (6 bytes of the id's SHA1) -> location, 5 bytes
                             (leaf * WQ_FAR_POSITIONS + position in the leaf's list)
A leaf is an aligned span of width * 16^level ms (level 0-4: a minute to 45 days), its id
(start / width - base) * 8 + level, base counting widths to WQ_FAR_EPOCH (small ids, so a
location fits 5 bytes); leaves never overlap. A job goes in the leaf covering its due
time, or in a new one, the widest free span holding it that starts beyond the horizon; a
leaf of WQ_FAR_CAP records splits into its 16 children, so sparse jobs share wide leaves
and dense ones narrow leaves, none more than WQ_FAR_CAP. The keys are built from the meta
key: one slot, as every key of the shard.
Includes: base, ids
]]
-- WQ_FAR_DEFAULT: a topic's horizon while its limits hash has no 'far' (an hour)
local WQ_FAR_WIDTH, WQ_FAR_FANOUT, WQ_FAR_TOP, WQ_FAR_DEFAULT = 60000, 16, 4, 3600000
-- WQ_FAR_EPOCH: 2023-11-14, before any far job's due time (leaf ids count from it)
local WQ_FAR_CAP, WQ_FAR_POSITIONS, WQ_FAR_LOAD, WQ_FAR_EPOCH = 512, 512, 32, 1700000000000

-- The far tier's functions, made only by a call that reads or writes a far tier (each local
-- function of a script is a closure made on every call: an enqueue to a topic without one
-- makes none of these). wq_far_state puts them on its table: far:find(id), far:put(jobs, now).
local function wq_far_tier()
  local WQ_FAR_OFFSET = {'>H', '>I3', '>I3', '>I4', '>I4'} -- by level + 1: the due ms into a leaf

  -- An id's fingerprint (6 bytes) and the 32 bits the index is addressed by.
  local function wq_far_fp(id)
    local n = tonumber(string.sub(redis.sha1hex(id), 1, 12), 16) -- 48 bits: a double holds them
    return struct.pack('>I6', n), math.floor(n / 65536)
  end

  local function wq_far_index(far, h)
    local n = 2 ^ far.level
    local address = h % n
    if address < far.split then
      address = h % (2 * n)
    end
    return far.meta .. ':ix:' .. wq_fmt(address)
  end

  -- A leaf's span, start and level from its id; its id from its start and level.
  local function wq_far_span(far, level)
    return far.width * WQ_FAR_FANOUT ^ level
  end

  local function wq_far_leaf(far, leaf)
    local level = leaf % 8
    return ((leaf - level) / 8 + far.base) * far.width, level
  end

  local function wq_far_leaf_id(far, start, level)
    return (start / far.width - far.base) * 8 + level
  end

  local function wq_far_key(far, leaf)
    return far.meta .. ':' .. wq_fmt(leaf)
  end

  -- Add `n` (< 0: take) to a leaf's count of live records.
  local function wq_far_live(far, leaf, n)
    local live = far.meta .. ':live'
    if redis.call('HINCRBY', live, wq_fmt(leaf), n) <= 0 then
      redis.call('HDEL', live, wq_fmt(leaf))
    end
  end

  -- A record of a leaf (at `start`, of `level`), and back: its id (a generated one in 16
  -- bytes: wq_id_codec), due ms and envelope.
  local wq_far_id_bytes, wq_far_id_text = wq_id_codec()

  local function wq_far_pack(id, due, envelope, start, level)
    local packed = wq_far_id_bytes(id)
    local head = packed and ('\0' .. packed) or (string.char(#id) .. id)
    return head .. struct.pack(WQ_FAR_OFFSET[level + 1], due - start) .. envelope
  end

  local function wq_far_unpack(record, start, level)
    local n, id = string.byte(record, 1)
    if n == 0 then
      n, id = 16, wq_far_id_text(string.sub(record, 2, 17))
    else
      id = string.sub(record, 2, 1 + n)
    end
    local offset, rest = struct.unpack(WQ_FAR_OFFSET[level + 1], record, 2 + n)
    return id, start + offset, string.sub(record, rest)
  end

  -- A record's due ms alone, its id not decoded (a list passes over records out of its range
  -- at this cost).
  local function wq_far_due(record, start, level)
    local n = string.byte(record, 1)
    return start + struct.unpack(WQ_FAR_OFFSET[level + 1], record, n == 0 and 18 or 2 + n)
  end

  -- A location as stored (5 bytes) and read back.
  local function wq_far_loc(leaf, position)
    return struct.pack('>I5', leaf * WQ_FAR_POSITIONS + position)
  end

  local function wq_far_where(loc)
    local n = struct.unpack('>I5', loc)
    local position = n % WQ_FAR_POSITIONS
    return (n - position) / WQ_FAR_POSITIONS, position
  end

  -- The far job stored under `id`: {ix, fp, due, envelope}, or nil.
  local function wq_far_find(far, id)
    if far.entries <= 0 then
      return nil
    end
    local fp, h = wq_far_fp(id)
    local ix = wq_far_index(far, h)
    local loc = redis.call('HGET', ix, fp)
    if not loc then
      return nil
    end
    local leaf, position = wq_far_where(loc)
    local record = redis.call('LINDEX', wq_far_key(far, leaf), position)
    if not record then
      return nil
    end
    local start, level = wq_far_leaf(far, leaf)
    local rid, due, envelope = wq_far_unpack(record, start, level)
    if rid ~= id then -- another id's fingerprint: that id keeps it, this one is not far
      return nil
    end
    return {ix = ix, fp = fp, due = due, envelope = envelope, leaf = leaf}
  end

  -- Whether the record of `id` at (leaf, position) is live: its index entry points at it.
  local function wq_far_indexed(far, id, leaf, position)
    local fp, h = wq_far_fp(id)
    return redis.call('HGET', wq_far_index(far, h), fp) == wq_far_loc(leaf, position)
  end

  -- Take a found far job out (its record stays, dead, until its leaf splits or is promoted).
  local function wq_far_drop(far, found)
    redis.call('HDEL', found.ix, found.fp)
    wq_far_live(far, found.leaf, -1)
    far.entries = far.entries - 1
    redis.call('HINCRBY', far.meta, 'entries', -1)
  end

  -- One more index hash: the entries of hash 'split' whose next address bit is set move to
  -- hash split + 2^level (linear hashing: a hash of about WQ_FAR_LOAD entries, an unsplit one
  -- up to twice that).
  local function wq_far_grow(far)
    local n = 2 ^ far.level
    local from = far.meta .. ':ix:' .. wq_fmt(far.split)
    local entries = redis.call('HGETALL', from)
    local moved, fps, m = {}, {}, 0
    for i = 1, #entries, 2 do
      local b1, b2, b3, b4 = string.byte(entries[i], 1, 4)
      if (((b1 * 256 + b2) * 256 + b3) * 256 + b4) % (2 * n) ~= far.split then
        moved[2 * m + 1], moved[2 * m + 2] = entries[i], entries[i + 1]
        m = m + 1
        fps[m] = entries[i]
      end
    end
    if m > 0 then
      wq_multi('HSET', far.meta .. ':ix:' .. wq_fmt(far.split + n), moved)
      wq_multi('HDEL', from, fps)
    end
    far.split = far.split + 1
    if far.split == n then
      far.level, far.split = far.level + 1, 0
    end
    redis.call('HSET', far.meta, 'level', far.level, 'split', far.split)
  end

  -- Append packed records to a leaf (at `start`); returns the position of the first.
  local function wq_far_append(far, leaf, start, records)
    local length = wq_multi('RPUSH', wq_far_key(far, leaf), records)
    if length == #records then
      redis.call('ZADD', far.meta .. ':buckets', wq_fmt(start), wq_fmt(leaf))
    end
    wq_far_live(far, leaf, #records)
    return length - #records
  end

  -- Split a full leaf: its live records (all, when its live count says none is dead; else
  -- those its index entries point at) are filed a level down, and a child that would hold
  -- more than half a leaf further down at once (a batch due close together goes to the
  -- narrow leaves it would reach split by split, each record moved once, not once a level).
  local function wq_far_split(far, leaf, start, level)
    local key = wq_far_key(far, leaf)
    local records = redis.call('LRANGE', key, 0, -1)
    local all = tonumber(redis.call('HGET', far.meta .. ':live', wq_fmt(leaf))) == #records
    local jobs = {} -- per live record: its index hash, fingerprint, id, due, envelope
    for position, record in ipairs(records) do
      local id, due, envelope = wq_far_unpack(record, start, level)
      local fp, h = wq_far_fp(id)
      local ix = wq_far_index(far, h)
      if all or redis.call('HGET', ix, fp) == wq_far_loc(leaf, position - 1) then
        jobs[#jobs + 1] = {ix, fp, id, due, envelope}
      end
    end
    redis.call('DEL', key)
    redis.call('ZREM', far.meta .. ':buckets', wq_fmt(leaf))
    redis.call('HDEL', far.meta .. ':live', wq_fmt(leaf))
    local function file(list, child) -- `list`: records of one span of level child + 1
      local span, groups, order = wq_far_span(far, child), {}, {}
      for _, job in ipairs(list) do
        local at = math.floor(job[4] / span) * span
        local group = groups[at]
        if not group then
          group = {}
          groups[at] = group
          order[#order + 1] = at
        end
        group[#group + 1] = job
      end
      for _, at in ipairs(order) do
        local group = groups[at]
        if child > 0 and #group > WQ_FAR_CAP / 2 then
          file(group, child - 1)
        else -- the records, then their index entries moved
          local packed, to = {}, wq_far_leaf_id(far, at, child)
          for i, job in ipairs(group) do
            packed[i] = wq_far_pack(job[3], job[4], job[5], at, child)
          end
          local first = wq_far_append(far, to, at, packed)
          for i, job in ipairs(group) do
            redis.call('HSET', job[1], job[2], wq_far_loc(to, first + i - 1))
          end
        end
      end
    end
    file(jobs, level - 1)
  end

  -- The leaf a job due at `due` goes in (id, start, level), made room in; nil when it belongs
  -- in the sorted set: the leaf covering `due` starts within the horizon (it is being
  -- promoted, or soon), or is a full leaf of level 0.
  local function wq_far_leaf_for(far, due, now)
    local low, buckets = now + far.horizon, far.meta .. ':buckets'
    for _ = 0, WQ_FAR_TOP do
      local found = redis.call('ZRANGE', buckets, wq_fmt(due), '-inf', 'BYSCORE', 'REV', 'LIMIT', 0,
        1, 'WITHSCORES')
      local leaf = found[1] and tonumber(found[1])
      local start, level
      if leaf then
        start, level = wq_far_leaf(far, leaf)
      end
      if not leaf or due >= start + wq_far_span(far, level) then
        -- no leaf covers it: the widest free span holding it, beyond the horizon (a leaf
        -- overlapping a span either lies inside it or would cover `due`)
        for l = WQ_FAR_TOP, 0, -1 do
          local span = wq_far_span(far, l)
          local at = math.floor(due / span) * span
          if at >= low and #redis.call('ZRANGE', buckets, wq_fmt(at), '(' .. wq_fmt(at + span),
              'BYSCORE', 'LIMIT', 0, 1) == 0 then
            return wq_far_leaf_id(far, at, l), at, l
          end
        end
        return nil
      end
      if start < low then
        return nil
      end
      if redis.call('LLEN', wq_far_key(far, leaf)) < WQ_FAR_CAP then
        return leaf, start, level
      end
      if level == 0 then
        return nil
      end
      wq_far_split(far, leaf, start, level) -- and look again: a child covers it, or will
    end
    return nil
  end

  -- Put jobs in the far tier where they belong: a job goes there when a leaf beyond the horizon
  -- takes it (see wq_far_leaf_for) and no other id holds its fingerprint. `jobs` holds per job
  -- its id, due ms and envelope (three entries a job); returns those no leaf took, as `jobs`
  -- holds them, for the caller to schedule in the sorted set as any job. A job's index entry
  -- is written first, where its record will be (HSETNX: one command both checks that the
  -- fingerprint is free and takes it, an id of this call included); consecutive jobs of one
  -- leaf are then appended together (one RPUSH, one count), so a batch in due order costs
  -- about one command a job; the leaf is written before another is looked for (a look may
  -- split).
  local function wq_far_put(far, jobs, now)
    local left, l = {}, 0
    if far.horizon <= 0 then
      return jobs
    end
    local open, add, added = nil, {}, 0 -- the leaf being appended to, its records and count
    -- index hashes the call may split off: two more than its jobs need, so a tier filled
    -- under a larger load (fewer hashes) catches up a few a call, not all in one
    local grows = math.floor(#jobs / 3 / WQ_FAR_LOAD) + 2
    local function flush()
      if added > 0 then
        wq_far_append(far, open.leaf, open.start, add)
        far.entries = far.entries + added
        redis.call('HINCRBY', far.meta, 'entries', added)
        while grows > 0 and far.entries > WQ_FAR_LOAD * (2 ^ far.level + far.split) do
          wq_far_grow(far)
          grows = grows - 1
        end
      end
      open, add, added = nil, {}, 0
    end
    for i = 1, #jobs, 3 do
      local id, due, envelope = jobs[i], jobs[i + 1], jobs[i + 2]
      local fp, h
      if due >= now + far.horizon and #id <= 255 then
        fp, h = wq_far_fp(id)
      end
      if fp and not (open and due >= open.start and due < open.finish
          and open.length + added < WQ_FAR_CAP) then
        flush()
        local leaf, start, level = wq_far_leaf_for(far, due, now)
        if leaf then
          open = {leaf = leaf, start = start, level = level,
            finish = start + wq_far_span(far, level),
            length = redis.call('LLEN', wq_far_key(far, leaf))}
        else
          fp = nil
        end
      end
      local record = fp and wq_far_pack(id, due, envelope, open.start, open.level)
      -- in the index's shape now: the records of this leaf are appended before it grows
      if record and redis.call('HSETNX', wq_far_index(far, h), fp,
          wq_far_loc(open.leaf, open.length + added)) == 1 then
        added = added + 1
        add[added] = record
      else
        left[l + 1], left[l + 2], left[l + 3] = id, due, envelope
        l = l + 3
      end
    end
    flush()
    return left
  end

  return {find = wq_far_find, drop = wq_far_drop, put = wq_far_put, leaf = wq_far_leaf,
    key = wq_far_key, index = wq_far_index, fp = wq_far_fp, unpack = wq_far_unpack,
    loc = wq_far_loc, live = wq_far_live, span = wq_far_span, due = wq_far_due,
    indexed = wq_far_indexed}
end

-- A far tier's functions (wq_far_tier) are made on the first use of one: a call that finds
-- no far job and puts none makes none.
local WQ_FAR_LAZY = {__index = function(far, name)
  for n, fn in pairs(wq_far_tier()) do
    rawset(far, n, fn)
  end
  return rawget(far, name)
end}

-- The far tier of a shard as one call sees it: its meta key, narrowest width, index shape,
-- count and horizon (`horizon`: the limits hash's 'far' as read, false when it has none, so
-- WQ_FAR_DEFAULT; '0': no far tier; nil: 0, for a caller that only finds and drops).
local function wq_far_state(meta, horizon)
  local raw = redis.call('HMGET', meta, 'width', 'level', 'split', 'entries')
  local width = tonumber(raw[1]) or WQ_FAR_WIDTH
  if horizon == false then
    horizon = WQ_FAR_DEFAULT
  end
  local far = {meta = meta, width = width, level = tonumber(raw[2]) or 0,
    split = tonumber(raw[3]) or 0, entries = tonumber(raw[4]) or 0,
    horizon = tonumber(horizon) or 0, base = math.floor(WQ_FAR_EPOCH / width)}
  return setmetatable(far, WQ_FAR_LAZY)
end

-- Whether a job due at `due` belongs beyond the far tier's horizon (far:put decides whether a
-- leaf takes it).
local function wq_far_takes(far, due, now)
  return far.horizon > 0 and due >= now + far.horizon
end

-- The far job stored under `id` ({ix, fp, due, envelope}, or nil) and the far tier as read
-- (`horizon` as for wq_far_state).
local function wq_far_found(meta, horizon, id)
  local far = wq_far_state(meta, horizon)
  return far.entries > 0 and far:find(id) or nil, far
end
