--[[ create_group.lua — create a consumer group of one shard's stream, unless the stream has its cap of groups.
The count and the XGROUP CREATE are one step, so creations racing on one shard never pass
the cap (wheelq.admin.groups.create_group undoes a creation some other shard refused).
KEYS[1]  {T:s}:stream    STREAM  the stream the group reads: {T:s}:ready (made if absent)
ARGV[1]  consumer group
ARGV[2]  where a new group starts: '0' (every entry still in the stream) or '$' (new ones)
ARGV[3]  most groups the stream may have (the cap), >= 1
Returns: {0, outcome, groups}   outcome: GROUP_FOUND (1, it exists: nothing done),
           GROUP_CREATED (4), GROUP_LIMIT (5, the stream has ARGV[3] groups: nothing done);
           groups: how many groups the stream has now
         {-1, key}   WRONG_TYPE (nothing written)
]]
local wrong = wq_wrong_type(KEYS[1], 'stream')
if wrong then return wrong end
local count = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  for _, flat in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    if wq_fields(flat)['name'] == ARGV[1] then
      return {WQ_OK, WQ_GROUP_FOUND, 0}
    end
    count = count + 1
  end
end
if count >= tonumber(ARGV[3]) then
  return {WQ_OK, WQ_GROUP_LIMIT, count}
end
redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], ARGV[2], 'MKSTREAM')
return {WQ_OK, WQ_GROUP_CREATED, count + 1}
