--[[ includes/selections.lua — a bulk action's guard (docs/architecture.md, "Bulk actions"):
whether a job is still as its selection recorded it (wq_as_selected).
Includes: far_tier, job_lists
]]
-- A bulk action's guard (docs/architecture.md, "Bulk actions"): whether job `id` is still as
-- its selection recorded it, in one script with the act, so a job moved or written again
-- meanwhile is left alone. As recorded: in `state` ('p': pending under its id, not a retry;
-- 'r': a pending retry, under the id or one of `aliases`, the id's alias members), due at
-- `due` (ms) with its envelope's stamp `stamp` (wq_stamp). `delayed`, `jobs`, `retries`,
-- `far`: the shard's {T:s}:delayed, :jobs, :retries and :far.
local function wq_as_selected(delayed, jobs, retries, far, id, aliases, state, due, stamp)
  due = tonumber(due)
  local function same(at, envelope, retry)
    return at ~= false and at ~= nil and envelope ~= false and envelope ~= nil
      and retry == (state == 'r') and tonumber(at) == due and wq_stamp(envelope) == stamp
  end
  local at, envelope = redis.call('ZSCORE', delayed, id), redis.call('HGET', jobs, id)
  if at and envelope then
    if same(at, envelope, redis.call('ZSCORE', retries, id) ~= false) then
      return true
    end
  elseif state == 'p' then -- a job is in one tier at a time; a retry is never in the far tier
    local found = wq_far_found(far, nil, id)
    return found ~= nil and same(found.due, found.envelope, false)
  end
  if state == 'r' then
    for _, alias in ipairs(aliases) do
      if same(redis.call('ZSCORE', delayed, alias), redis.call('HGET', jobs, alias), true) then
        return true
      end
    end
  end
  return false
end
