--[[ weights_put.lua — replace a shard's copy of its topic's fair weights in one step, so the
leader never reads a half-written set (wheelq.core.flow.TopicLimits.fair_weights;
docs/architecture.md, "The due line").
KEYS[1]  {T:s}:weights   HASH    job key -> its weight, an int in [1, 1000] (a key not named: 1)
ARGV[1..] key, weight, key, weight, ... (none: the weights are cleared)
Returns: {0, n}   the weights the shard holds now
Includes: base, status
]]
redis.call('DEL', KEYS[1])
if #ARGV > 0 then
  wq_multi('HSET', KEYS[1], ARGV)
end
return {WQ_OK, #ARGV / 2}
