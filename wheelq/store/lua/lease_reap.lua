--[[ lease_reap.lua — free the lease of a leader whose process died: its token is the lease's,
it had registered its liveness connection (its wake subscription, lease_followed.lua), and that
connection has stayed gone, on this server, for ARGV[2] ms of the Redis clock since a watcher
first saw it gone, without the leader registering again. The first call that finds it gone
stamps the mark with the time ("token ms") and frees nothing; a call at least the grace later
that still finds it gone and the stamp unchanged frees the lease. A live leader that loses the
connection reconnects and registers again within the grace (lease_followed.lua writes a plain
mark), so it keeps its lease; a paused, slow or cut-off one that keeps its connection open keeps
its lease until the TTL; a new leader not yet subscribed is not marked. Only the holder the
caller names in ARGV[3] is freed: the caller has seen in CLIENT LIST (which a script cannot
read) that none of that process's connections is left, so a live leader whose liveness
connection alone was dropped, too starved to register again within the grace, is not taken
for a dead one.
Freed, the shard is taken like any free one (fenced as ever).
KEYS[1]  {T:s}:lease     STRING  token of the leader
KEYS[2]  {T:s}:followed  STRING  the mark: token of a leader whose liveness connection is
                                 registered, "token ms" once a watcher has seen it gone
KEYS[3]  {T:s}:horizon   STRING  ms the leader has preloaded up to
ARGV[1]  the shard's wake channel
ARGV[2]  grace, ms: how long the connection must stay gone
ARGV[3]  the token of a holder the caller has seen gone (none of its connections left): its
         lease is freed once the grace is over; another holder's, or "", is not (state 4)
Returns: {0, state, holder, wait_ms}
           state   0: held by a live (or not marked) leader; a stamp is cleared
                   1: freed (the connection stayed gone past the grace)
                   2: free already
                   3: gone, not for the whole grace yet: stamped (first sight), nothing freed
                   4: gone past the grace, not freed (the holder is not ARGV[3])
           holder  the token found in the lease ("" when free)
           wait_ms state 3: ms until the grace ends (call again then); else 0
Includes: base, lease, status
]]
local holder = redis.call('GET', KEYS[1])
if not holder then
  return {WQ_OK, 2, '', 0}
end
local mark = redis.call('GET', KEYS[2])
local marked, since = wq_marked(mark, holder)
if not marked then
  return {WQ_OK, 0, holder, 0}
end
if redis.call('PUBSUB', 'SHARDNUMSUB', ARGV[1])[2] > 0 then
  if since then  -- there again: a later loss starts a grace of its own
    redis.call('SET', KEYS[2], holder)
  end
  return {WQ_OK, 0, holder, 0}
end
local now = wq_now_ms()
local grace = tonumber(ARGV[2])
if not since then
  redis.call('SET', KEYS[2], holder .. ' ' .. wq_fmt(now))
  return {WQ_OK, 3, holder, grace}
end
if now - since < grace then
  return {WQ_OK, 3, holder, since + grace - now}
end
if ARGV[3] ~= holder then
  return {WQ_OK, 4, holder, 0}
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return {WQ_OK, 1, holder, 0}
