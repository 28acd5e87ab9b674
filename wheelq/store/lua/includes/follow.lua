--[[ includes/follow.lua — jobs that follow jobs (wheelq.core.follow; docs/architecture.md,
"Jobs that follow jobs"). On the shard of a job waited on, `followers` ({T:s}:followers, HASH)
maps its id to the jobs waiting on an outcome of it: a msgpack array of edges {group, waiting
job's topic, its shard, its id, its token}. A script that ends a job there (ack: 'S', dead
letters: 'D', cancel: 'C', expiry: 'X') asks wq_followed once per call (one EXISTS: nothing
more when no job of the shard is waited on), then wq_tell for each job it ended: each edge of
the job's group ('': every group, a pending first attempt cancelled or dropped) becomes a
notice in `notices` ({T:s}:notices, STREAM, one field 'n': msgpack {waiting topic, shard,
id, token, the ended job's id, its group, outcome, error}), and the edge leaves. wq_nudge then
tells the shard's leader once a call: a '!' in its inbox (the durable copy) and on its wake
channel ({T:s}:wake, the same hash tag: a script may publish on it). The leader moves each
notice to the waiting job's shard (resolve.lua) and deletes it after: a notice stays until
its waiting job has heard it, and hearing one twice changes nothing.
Includes: none
]]
local WQ_NUDGE = '!' -- the inbox / wake note that says: notices wait (wheelq.core.follow)
local WQ_WAIT_DUE = 253402300799999 -- a waiting job's due ms (wheelq.core.follow.WAIT_DUE_MS)
local WQ_EARLY_MS = 600000 -- an early outcome is kept this long (wheelq.core.follow.EARLY_MS)
local WQ_CHILDREN_KEEP_MS = 259200000 -- a join's children list, after it waits (3 days:
                                      -- wheelq.core.follow.CHILDREN_KEEP_MS)

local function wq_followed(followers)
  return redis.call('EXISTS', followers) == 1
end

-- Tell the followers of job `id` that it ended in `group` ('' every group) with `outcome`;
-- returns how many notices were added.
local function wq_tell(followers, notices, id, group, outcome, err)
  local raw = redis.call('HGET', followers, id)
  if not raw then
    return 0
  end
  local edges, keep, told = cmsgpack.unpack(raw), {}, 0
  for _, e in ipairs(edges) do
    if group == '' or e[1] == group then
      redis.call('XADD', notices, '*', 'n',
        cmsgpack.pack({e[2], e[3], e[4], e[5], id, e[1], outcome, err or ''}))
      told = told + 1
    else
      keep[#keep + 1] = e
    end
  end
  if #keep == 0 then
    redis.call('HDEL', followers, id)
  elseif told > 0 then
    redis.call('HSET', followers, id, cmsgpack.pack(keep))
  end
  return told
end

-- Tell the followers of the jobs of `fields` (every `step`-th item from the first: history
-- fields "id<US>group") that each ended there with `outcome`; returns the notices added.
local function wq_tell_fields(followers, notices, fields, step, outcome, errs)
  local told = 0
  for i = 1, #fields, step do
    local id, group = string.match(fields[i], '^(.-)\31(.*)$')
    if id then
      told = told + wq_tell(followers, notices, id, group, outcome, errs and errs[i] or '')
    end
  end
  return told
end

-- Tell the shard's leader that notices wait (once a call that added any).
local function wq_nudge(inbox, followers)
  redis.call('RPUSH', inbox, WQ_NUDGE)
  redis.call('SPUBLISH', string.sub(followers, 1, -11) .. ':wake', WQ_NUDGE)
end
