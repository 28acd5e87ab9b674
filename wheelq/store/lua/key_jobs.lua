--[[ key_jobs.lua — one key's jobs on one shard, found through the key index (includes/keyed.lua):
a slice of the key's entries, each entry whose id still has a pending member of the key as a
row, in list order (no order by due time: the caller sorts). A member is the job under its id
(in the sorted set, the far tier, or due on the line) or a retry under an alias member; an id
listed twice, or pending under another key since, gives no row twice or at all. Cost: the
slice's entries, however many jobs the shard holds.
KEYS[1]  {T:s}:keyed     HASH    the key index's counts (the lists are named after it)
KEYS[2]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[3]  {T:s}:jobs      HASH    member -> envelope
KEYS[4]  {T:s}:retries   ZSET    pending retries' members: an id's aliases by lex range
KEYS[5]  {T:s}:far       HASH    the far tier's meta (wq_far_state)
KEYS[6]  {T:s}:held      HASH    the due line's jobs: due and not fired yet
ARGV[1]  the key
ARGV[2]  the index of the key's entries to read from (0: the first)
ARGV[3]  entries to read, 1-5000
ARGV[4]  the largest envelope returned whole, bytes (a larger one comes back as its size)
ARGV[5]  '1': each row carries its envelope's stamp too (wq_stamp); '': not
Returns: {0, next, member, due, envelope or size, [stamp,] kind, ...}
           next   the index to go on from, -1 once the key's entries are read to their end
           kind   'p' the job pending under its id, 'r' a pending retry (under its id, in the
                  index of pending retries, or under an alias member), 'l' due and waiting on
                  the line (due: when it came due)
         {-1, key}   WRONG_TYPE
Includes: base, far_tier, ids, job_lists, keyed, status
]]
local wrong = wq_wrong_type(KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'zset',
  KEYS[6], 'hash')
if wrong then return wrong end
local key, from, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local max, stamps = tonumber(ARGV[4]), ARGV[5] == '1'
local ids, more = wq_keyed_entries(KEYS[1], key, from, count, nil, nil)
local out = {WQ_OK, more and from + #ids or -1}
local far = nil -- read on first need
local seen = {}
local function row(member, due, envelope, kind)
  out[#out + 1] = member
  out[#out + 1] = due
  out[#out + 1] = #envelope > max and #envelope or envelope
  if stamps then
    out[#out + 1] = wq_stamp(envelope)
  end
  out[#out + 1] = kind
end
for _, id in ipairs(ids) do
  if not seen[id] then
    seen[id] = true
    local envelope = redis.call('HGET', KEYS[3], id)
    if envelope and wq_key_of(envelope) == key then
      local due = redis.call('ZSCORE', KEYS[2], id)
      if due then
        row(id, due, envelope, redis.call('ZSCORE', KEYS[4], id) and 'r' or 'p')
      else
        local at = redis.call('HGET', KEYS[6], id) -- "due lane" (includes/held.lua)
        if at then
          row(id, string.match(at, '^(%-?%d+)'), envelope, 'l')
        end
      end
    elseif not envelope then
      far = far or wq_far_state(KEYS[5], nil)
      local found = far.entries > 0 and far:find(id)
      if found and wq_key_of(found.envelope) == key then
        row(id, found.due, found.envelope, 'p')
      end
    end
    local aliases = redis.call('ZRANGE', KEYS[4], '[' .. id .. '\31', '(' .. id .. '\32',
      'BYLEX')
    for _, alias in ipairs(aliases) do
      local held = redis.call('HGET', KEYS[3], alias)
      local due = held and redis.call('ZSCORE', KEYS[2], alias)
      if due and wq_key_of(held) == key then
        row(alias, due, held, 'r')
      end
    end
  end
end
return out
