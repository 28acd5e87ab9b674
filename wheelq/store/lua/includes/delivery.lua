--[[ includes/delivery.lua — whether an entry is still pending to the delivery a pull receipt
names (wq_delivered): ack, retry and dead_letter settle nothing for a stale receipt.
Includes: none
]]
-- Whether `entry` is pending in `group` to the delivery a pull receipt names (the consumer it
-- went to and its delivery count then; wheelq.worker.pull): 1 it is, 0 it is not pending
-- (settled already), -1 it is pending to a later delivery (taken over since: the receipt is
-- stale and must settle nothing). No stream or no such group: not pending, as XACK has it.
local function wq_delivered(stream, group, entry, consumer, deliveries)
  local found = redis.pcall('XPENDING', stream, group, entry, entry, 1)
  local p = not found.err and found[1]
  if not p then
    return 0
  end
  if p[2] == consumer and p[4] == tonumber(deliveries) then
    return 1
  end
  return -1
end
