--[[ includes/held.lua — the due line (docs/architecture.md, "The due line"): on a shard that
orders its due jobs, a job whose due time has come waits in a lane, scored by its order key
(due ms - priority x credit), until the stream has room; wq_take hands out the best, the lanes
taking weighted turns. wq_line reads a shard's settings, wq_hold puts a job on the line,
wq_take takes the next ones off, wq_unhold takes one job off wherever it waits.
Includes: base
]]
local WQ_DEFAULT_PRIORITY = 5
local WQ_DEFAULT_CREDIT_MS = 1000 -- priority_credit_ms when the topic sets none
local WQ_DEFAULT_LEAD = 32 -- undelivered entries a stream may hold while jobs wait on the line
-- The channel workers follow a topic's pauses and due line on (wheelq.core.keys.PAUSED_CHANNEL):
-- a shard that starts ordering its due jobs publishes its topic there.
local WQ_PAUSED_CHANNEL = 'wheelq:paused'

-- The fields of a shard's limits hash its due line reads (wq_line), in its order; a caller
-- that reads others of the hash asks for them after these, in one HMGET.
local WQ_LINE_FIELDS = {'ordered', 'fair', 'credit', 'lead', 'vtime'}

-- A shard's due line from its keys and its limits hash's WQ_LINE_FIELDS as read (`f`): nil
-- when it does not order its due jobs (neither 'ordered' nor 'fair'), else {held, turns,
-- weights, lanes (the lane keys' prefix), limits, credit, fair, lead, vtime, weight = {}}.
-- `held` is {T:s}:held; the lanes' keys are named after it.
local function wq_line(limits, held, turns, weights, f)
  if not f[1] and not f[2] then
    return nil
  end
  return {
    held = held,
    turns = turns,
    weights = weights,
    lanes = string.sub(held, 1, -5) .. 'lane:',
    limits = limits,
    credit = tonumber(f[3]) or WQ_DEFAULT_CREDIT_MS,
    fair = f[2] == '1',
    lead = tonumber(f[4]) or WQ_DEFAULT_LEAD,
    vtime = tonumber(f[5]) or 0,
    weight = {},
  }
end

-- A decoded envelope's priority (option slot 13: '' or absent is the default).
local function wq_priority(env)
  local p = env and env[13]
  if p == nil or p == '' then
    return WQ_DEFAULT_PRIORITY
  end
  return tonumber(p) or WQ_DEFAULT_PRIORITY
end

-- A lane's weight (its key's in {T:s}:weights, default 1), read once a call.
local function wq_weight(line, lane)
  local w = line.weight[lane]
  if not w then
    w = 1
    if lane ~= '' then
      w = tonumber(redis.call('HGET', line.weights, string.sub(lane, 3))) or 1
    end
    line.weight[lane] = w
  end
  return w
end

-- Put `members` on the line, each due at `dues[i]` with its decoded envelope `envs[i]` (false
-- when undecodable): its lane is its key's when the topic is fair and it has one, else the
-- shared lane ''; a lane that had no job takes its turn after the last turn taken (vtime), so
-- a key that was idle gets no credit for it and a new one waits about one turn. One ZADD a
-- lane and one HSET for the lot: a burst's page is lined at a few commands, not three a job.
local function wq_hold(line, members, dues, envs)
  local by_lane, held = {}, {}
  for i, member in ipairs(members) do
    local env = envs[i] or nil
    local lane = ''
    if line.fair and env and type(env[10]) == 'string' and env[10] ~= '' then
      lane = 'k:' .. env[10]
    end
    local args = by_lane[lane]
    if not args then
      args = {}
      by_lane[lane] = args
    end
    local due = tonumber(dues[i])
    args[#args + 1] = wq_fmt(due - wq_priority(env) * line.credit)
    args[#args + 1] = member
    held[#held + 1] = member
    held[#held + 1] = wq_fmt(due) .. ' ' .. lane
  end
  for lane, args in pairs(by_lane) do
    wq_multi('ZADD', line.lanes .. lane, args)
    redis.call('ZADD', line.turns, 'NX', string.format('%.17g', line.vtime + 1 / wq_weight(line, lane)), lane)
  end
  if #held > 0 then
    wq_multi('HSET', line.held, held)
  end
end

-- Take up to `n` jobs off the line, best first: the lane whose turn comes first gives its
-- lowest order key, and its next turn comes 1/weight later. Returns {member, due, lane,
-- order} tables; notes the last turn taken (vtime) in the limits hash.
local function wq_take(line, n)
  local out = {}
  local took = false
  while #out < n do
    local top = redis.call('ZRANGE', line.turns, 0, 1, 'WITHSCORES')
    if #top == 0 then
      break
    end
    local lane, turn = top[1], tonumber(top[2])
    local lane_key = line.lanes .. lane
    -- The only lane with jobs (a topic that is not fair): take what is asked at once.
    local count = 1
    if #top == 2 then
      count = n - #out
    end
    local got = redis.call('ZPOPMIN', lane_key, count)
    for i = 1, #got, 2 do
      out[#out + 1] = {got[i], nil, lane, got[i + 1]}
    end
    line.vtime, took = turn, true
    if redis.call('EXISTS', lane_key) == 1 then
      redis.call('ZADD', line.turns, string.format('%.17g', turn + 1 / wq_weight(line, lane)), lane)
    else
      redis.call('ZREM', line.turns, lane)
    end
  end
  if took then
    redis.call('HSET', line.limits, 'vtime', string.format('%.17g', line.vtime))
  end
  if #out > 0 then -- their due times, and out of the held hash: one HMGET, one HDEL
    local members = {}
    for i, t in ipairs(out) do
      members[i] = t[1]
    end
    local at = wq_multi('HMGET', line.held, members)
    wq_multi('HDEL', line.held, members)
    for i, t in ipairs(out) do
      t[2] = at[i] and tonumber(string.match(at[i], '^(%-?%d+)')) or tonumber(t[4])
    end
  end
  return out
end

-- Put back what wq_take took and the caller could not fire (a byte budget), at its place.
local function wq_put_back(line, taken)
  local lanes = {}
  for _, t in ipairs(taken) do
    redis.call('ZADD', line.lanes .. t[3], t[4], t[1])
    redis.call('HSET', line.held, t[1], wq_fmt(t[2]) .. ' ' .. t[3])
    lanes[t[3]] = true
  end
  for lane in pairs(lanes) do
    redis.call('ZADD', line.turns, 'NX', string.format('%.17g', line.vtime), lane)
  end
end

-- Take `member` off the line wherever it waits (cancel, reschedule, a dropped job): returns
-- its due ms, or nil when it was not held. `held` is {T:s}:held; its turns key is named after
-- it, so a script that only removes needs no other key.
local function wq_unhold(held, member)
  local at = redis.call('HGET', held, member)
  if not at then
    return nil
  end
  local due, lane = string.match(at, '^(%-?%d+) (.*)$')
  local prefix = string.sub(held, 1, -5)
  local lane_key = prefix .. 'lane:' .. lane
  redis.call('ZREM', lane_key, member)
  redis.call('HDEL', held, member)
  if redis.call('EXISTS', lane_key) == 0 then
    redis.call('ZREM', prefix .. 'turns', lane)
  end
  return tonumber(due)
end
