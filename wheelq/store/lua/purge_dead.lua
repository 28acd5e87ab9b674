--[[ purge_dead.lua — delete a shard's whole dead-letter stream, counting what it held.
KEYS[1]  {T:s}:dead      STREAM  dead letters
ARGV     none
Returns: {0, deleted}   entries the stream held (0 when there was none)
         {-1, key}   WRONG_TYPE (nothing deleted)
Includes: status
]]
local wrong = wq_wrong_type(KEYS[1], 'stream')
if wrong then return wrong end
local n = redis.call('XLEN', KEYS[1])
redis.call('DEL', KEYS[1])
return {WQ_OK, n}
