--[[ includes/lease.lua — a shard lease's followed mark ({T:s}:followed): whose it is, and since
when a watcher has seen its holder's liveness connection gone (wq_marked; docs/architecture.md,
"Leases and failover").
Includes: none
]]
-- Whether `mark` ({T:s}:followed) is `token`'s, and since when (Redis ms) a watcher has seen
-- its liveness connection gone (nil: not seen gone). The mark is the token, or "token ms".
local function wq_marked(mark, token)
  if not mark then
    return false, nil
  end
  if mark == token then
    return true, nil
  end
  local n = #token
  if string.sub(mark, 1, n + 1) ~= token .. ' ' then
    return false, nil
  end
  local since = tonumber(string.sub(mark, n + 2))
  return since ~= nil, since
end
