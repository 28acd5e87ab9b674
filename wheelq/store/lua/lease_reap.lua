--[[ lease_reap.lua — free the lease of a leader whose process died: its token is the lease's,
it had confirmed its wake subscription (lease_followed.lua), and the channel has no subscriber
on this server any more (Redis dropped the dead process's connections). A leader alive but
paused, slow or cut off keeps its connection open and its lease until the TTL; a new leader
not yet subscribed is not marked. Freed, the shard is taken like any free one (fenced as ever).
KEYS[1]  {T:s}:lease     STRING  token of the leader
KEYS[2]  {T:s}:followed  STRING  token of a leader whose wake subscription is confirmed
KEYS[3]  {T:s}:horizon   STRING  ms the leader has preloaded up to
ARGV[1]  the shard's wake channel
Returns: {0, state, holder}
           state   0: held by a live (or not followed) leader, nothing written
                   1: freed (the holder's process is gone)
                   2: free already
           holder  the token found in the lease ("" when free)
]]
local holder = redis.call('GET', KEYS[1])
if not holder then
  return {WQ_OK, 2, ''}
end
if redis.call('GET', KEYS[2]) ~= holder then
  return {WQ_OK, 0, holder}
end
if redis.call('PUBSUB', 'SHARDNUMSUB', ARGV[1])[2] > 0 then
  return {WQ_OK, 0, holder}
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return {WQ_OK, 1, holder}
