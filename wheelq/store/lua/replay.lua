--[[ replay.lua — run dead letters again: append each to the ready stream as a first attempt,
due now, for the group it failed in, and remove it from the dead-letter stream.
Entries are fired by wq_fire, the helper emit_due fires through, from the envelope
wq_entry_envelope reads back from the dead letter's entry fields, so a replayed entry has the
fields of an emitted one and every optional field the job's entry had (trace, callback, key,
ordered: a replayed keyed job still runs in its key's order). A malformed dead letter (reason 'malformed', or an entry that does
not name a job and its payload) cannot be replayed and is left where it is. Under the topic's max_ready (KEYS[5]) only as
many as the stream has room for are replayed; the others stay dead letters, counted as held.
KEYS[1]  {T:s}:dead      STREAM  dead letters
KEYS[2]  {T:s}:ready     STREAM  fired jobs
KEYS[3]  {T:s}:history   HASH    the replayed job's record in its group becomes 'F'
KEYS[4]  {T:s}:history_old HASH  the history's previous generation (read by wq_fired)
KEYS[5]  {T:s}:limits    HASH    "ready": most fired jobs the slowest group may have to catch
         up on (wheelq.core.flow)
KEYS[6]  {T:s}:callbacks STREAM  where a job with a callback is replayed (wq_fire)
KEYS[7]  {T:s}:events    STREAM  job events while the topic has them on (wq_event)
ARGV[1]  topic
ARGV[2..] dead-letter entry ids
Returns: {0, replayed, held, unreplayable_id_1, ...}   held: left for want of room under
           the "ready" limit; ids not found are none of these
         {-1, key}   WRONG_TYPE (nothing written)
Includes: base, envelope, events, fire, flow, history, status
]]
wq_events_on(KEYS[5], KEYS[7])
local wrong = wq_wrong_type(KEYS[1], 'stream', KEYS[2], 'stream', KEYS[3], 'hash')
if wrong then return wrong end
local out, fired = {WQ_OK, 0, 0}, {}
local now = wq_fmt(wq_now_ms())
local room = wq_room(redis.call('HGET', KEYS[5], 'ready'), {KEYS[2], KEYS[6]})
for i = 2, #ARGV do
  local found = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])[1]
  if found then
    local f = wq_fields(found[2])
    local replayable = f['id'] and f['payload'] and f['reason'] ~= 'malformed'
    if replayable and room and room <= 0 then
      out[3] = out[3] + 1
    elseif replayable then
      if room then
        room = room - 1
      end
      -- the dead letter's 'group' (the one it failed in) comes after its entry's own
      local env = wq_entry_envelope(f, f['group'])
      local added = wq_fire(KEYS[2], ARGV[1], f['id'], now, env, KEYS[6], fired)
      if type(added) == 'table' and added.err then
        wq_events('fired', nil, fired)
        return redis.error_reply(added.err)
      end
      local rec = {}
      wq_fired(rec, KEYS[3], KEYS[4], f['id'], env, added)
      wq_remember(KEYS[3], rec)
      redis.call('XDEL', KEYS[1], ARGV[i])
      out[2] = out[2] + 1
    else
      out[#out + 1] = ARGV[i]
    end
  end
end
wq_events('fired', nil, fired)
return out
