--[[ replay.lua — run dead letters again: append each to the ready stream as a first attempt,
due now, for the group it failed in, and remove it from the dead-letter stream.
An entry that does not name a job and its payload (a malformed one) cannot be replayed and is
left where it is.
KEYS[1]  {T:s}:dead      STREAM
KEYS[2]  {T:s}:ready     STREAM
ARGV[1]  topic
ARGV[2..] dead-letter entry ids
Returns: {0, replayed, unreplayable_id_1, ...}   ids not found are neither
         {-1, key} wrong type (nothing written)
]]
local bad = wq_bad_type(KEYS[1], 'stream', KEYS[2], 'stream')
if bad then
  return {-1, bad}
end
local out = {0, 0}
local now = wq_fmt(wq_now_ms())
for i = 2, #ARGV do
  local found = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])[1]
  if found then
    local f = {}
    for j = 1, #found[2], 2 do
      f[found[2][j]] = found[2][j + 1]
    end
    if f['id'] and f['payload'] then
      local args = {KEYS[2], '*', 'id', f['id'], 'topic', ARGV[1], 'due', now, 'attempt', '1',
        'max_attempts', f['max_attempts'] or '1', 'payload', f['payload']}
      if f['group'] and f['group'] ~= '' then
        args[#args + 1] = 'group'
        args[#args + 1] = f['group']
      end
      redis.call('XADD', unpack(args))
      redis.call('XDEL', KEYS[1], ARGV[i])
      out[2] = out[2] + 1
    else
      out[#out + 1] = ARGV[i]
    end
  end
end
return out
