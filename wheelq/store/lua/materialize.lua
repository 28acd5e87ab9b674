--[[ materialize.lua — write one schedule's runs that live in this shard, as ordinary jobs
with the ids "<name>@<occurrence ms>". Fenced and idempotent: a writer whose epoch is below
the one recorded here (a deposed planner, or one that read the schedule before a pause) is
refused, and a run at or before the latest one written here is not written again, so each
run exists at most once whatever nodes die or pause between writing and recording.
KEYS[1]  {T:s}:delayed     ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs        HASH    job id -> envelope
KEYS[3]  {T:s}:ready       STREAM  fired jobs
KEYS[4]  {T:s}:horizon     STRING  ms the leader has preloaded up to (absent: no leader)
KEYS[5]  {T:s}:inbox       LIST    "due:id" notes for the leader
KEYS[6]  {T:s}:history     HASH    job id -> its latest entry
KEYS[7]  {T:s}:history_old HASH    the history's previous generation
KEYS[8]  {T:s}:sched_marks HASH    name -> "epoch:ms of the latest run written here"
KEYS[9]  {T:s}:limits      HASH    "ready": a run due now fires only while the stream has room
         under it, else it is scheduled at its time (wheelq.core.flow)
KEYS[10] {T:s}:callbacks   STREAM  fired jobs that carry a callback (wq_fire)
KEYS[11] {T:s}:events    STREAM  job events while the topic has them on (wq_event)
KEYS[12] {T:s}:far       HASH    the far tier's meta: a job of a run's id pending there is
         pending as one in KEYS[2] is (not written again)
KEYS[13] {T:s}:keyed     HASH    the key index (includes/keyed.lua): a run left pending is noted
         under its key (every run of a schedule has the same options)
ARGV[1]  topic
ARGV[2]  wake channel
ARGV[3]  the writer's epoch
ARGV[4]  schedule name
ARGV[5..] per run, ascending: occurrence ms, envelope (msgpack)
Returns: {0, written}   runs written (fired now if due, else scheduled)
         {-2}           LEASE_LOST: a newer epoch is recorded here (nothing written)
         {-1, key}      WRONG_TYPE (nothing written)
         {-3, topic, id, why}   MALFORMED: an envelope due now cannot be decoded
Includes: base, events, far_tier, fire, flow, keyed, pending, status
]]
wq_events_on(KEYS[9], KEYS[11])
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'stream', KEYS[5], 'list',
  KEYS[8], 'hash')
if wrong then return wrong end
local epoch, name = tonumber(ARGV[3]), ARGV[4]
local mark = redis.call('HGET', KEYS[8], name)
local e, last = 0, 0
if mark then
  local a, b = string.match(mark, '^(%d+):(%d+)$')
  e, last = tonumber(a), tonumber(b)
end
if epoch < e then
  return {WQ_LEASE_LOST}
end
local horizon = tonumber(redis.call('GET', KEYS[4]))
local far = redis.call('HGET', KEYS[9], 'far')
local now = wq_now_ms()
local written = 0
local room, asked = nil, false -- room nil: no limit, or not asked yet (at the first run due now)
local index, key = nil, nil -- the key index's changes, and the runs' key (read from the first)
for i = 5, #ARGV, 2 do
  local at = tonumber(ARGV[i])
  if at > last then
    local id = name .. '@' .. ARGV[i]
    if redis.call('HEXISTS', KEYS[2], id) == 0 and not wq_far_found(KEYS[12], far, id) then
      if at <= now and not asked then
        room, asked = wq_fire_room(KEYS[9], {KEYS[3], KEYS[10]}), true
      end
      if at <= now and not (room and room <= 0) then
        if room then
          room = room - 1
        end
        local refused = wq_fire_now(KEYS[3], KEYS[6], KEYS[7], ARGV[1], id, at, ARGV[i + 1],
          KEYS[10])
        if refused then
          redis.call('HSET', KEYS[8], name, wq_fmt(epoch) .. ':' .. wq_fmt(last))
          return refused
        end
      else
        wq_schedule(KEYS[1], KEYS[2], KEYS[5], ARGV[2], horizon, id, at, ARGV[i + 1])
        if key == nil then
          key = wq_key_of(ARGV[i + 1]) or false
        end
        if key then
          index = index or wq_keyed(KEYS[13])
          index.note(key, id)
        end
      end
      written = written + 1
    end
    last = at
  end
end
redis.call('HSET', KEYS[8], name, wq_fmt(epoch) .. ':' .. wq_fmt(last))
if index then
  index.apply(wq_keyed_live(KEYS[2], nil, KEYS[12])) -- (runs are never retries)
end
return {WQ_OK, written}
