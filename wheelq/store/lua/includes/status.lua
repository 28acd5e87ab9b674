--[[ includes/status.lua — the reply statuses every script returns first, what enqueue and
reschedule did with a job, what the group scripts found or did (the numbers of
wheelq.store.scripts' Status, Placed, NOT_PENDING and GroupOutcome: a unit test holds the two
tables together), and wq_wrong_type, the check that answers WRONG_TYPE before a script writes.
Includes: none
]]
-- Reply status: the first element of every reply, the same in every script
-- (wheelq.store.scripts.Status; a unit test holds the two tables together).
local WQ_OK = 0           -- {0, outcome fields...}: as each script's header says
local WQ_WRONG_TYPE = -1  -- {-1, key}: the key holds another type; nothing written
local WQ_LEASE_LOST = -2  -- {-2}: the caller does not hold the shard's lease; nothing written
local WQ_MALFORMED = -3   -- {-3, topic, job id, why}: a job due now cannot be decoded
local WQ_LATE = -4        -- {-4, topic, deadline ms, now ms}: a replay past its deadline

-- What enqueue and reschedule did with a job (wheelq.store.scripts.Placed, NOT_PENDING).
local WQ_SCHEDULED = 0
local WQ_FIRED = 1
local WQ_DUPLICATE = 2    -- enqueue: pending already, replace not asked for (not written)
local WQ_NOT_PENDING = 3  -- reschedule: no such pending job (nothing written)
local WQ_APPLIED = 4      -- enqueue, a spool replay: an earlier call applied it (not written)
local WQ_FULL = 5         -- enqueue: the shard is at its max_pending share (nothing written)

-- What delete_group and create_group found or did on one stream (wheelq.store.scripts.GroupOutcome).
local WQ_NO_GROUP = 0         -- no such group (or no stream): nothing done
local WQ_GROUP_FOUND = 1      -- 'check' mode: the group is there; nothing done
local WQ_GROUP_BUSY = 2       -- 'delete' mode: entries in flight; the group is kept
local WQ_GROUP_DESTROYED = 3  -- XGROUP DESTROY done
local WQ_GROUP_CREATED = 4    -- create_group: XGROUP CREATE done
local WQ_GROUP_LIMIT = 5      -- create_group: the stream has its cap of groups; nothing done

-- The WRONG_TYPE reply {-1, key} naming the first key whose type is neither absent nor the
-- expected one (arguments: key, type, key, type, ...); nil when every key fits.
-- Called before the first write, so a script never fails half-way.
local function wq_wrong_type(...)
  local a = {...}
  for i = 1, #a, 2 do
    local t = redis.call('TYPE', a[i])['ok']
    if t ~= 'none' and t ~= a[i + 1] then
      return {WQ_WRONG_TYPE, a[i]}
    end
  end
  return nil
end
