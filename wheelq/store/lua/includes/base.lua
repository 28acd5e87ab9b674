--[[ includes/base.lua — what the other concerns build on: a number written as Redis keeps it
(wq_fmt: '%d' for whole ms, '%.0f' else; Lua's tostring() turns 13-digit ms into exponent
notation), a command over many arguments in slices (wq_multi), the server's clock (wq_now_ms),
a flat reply as a table (wq_fields) and stream ids in order (wq_id, wq_id_lt).
Includes: none
]]
local function wq_fmt(n)
  -- A whole number (every ms time is one) goes through the C library's integer formatting,
  -- a tenth of the cost of its float formatting; anything else is rounded by '%.0f'.
  if n % 1 == 0 and n > -9007199254740992 and n < 9007199254740992 then
    return string.format('%d', n)
  end
  return string.format('%.0f', n)
end

-- redis.call(cmd, key, args...) in slices of at most 4000 arguments (Lua's unpack() limit is
-- about 8000; an even slice size keeps field/value pairs together). Returns the replies joined
-- when each is a list (HMGET), else the last reply.
-- With call = redis.pcall, an error reply (a table with .err) is returned as it comes.
local function wq_multi(cmd, key, args, call)
  call = call or redis.call
  local out = {}
  local last
  for i = 1, #args, 4000 do
    last = call(cmd, key, unpack(args, i, math.min(i + 3999, #args)))
    if type(last) == 'table' and last.err then
      return last
    end
    if type(last) == 'table' then
      for _, v in ipairs(last) do
        out[#out + 1] = v
      end
    end
  end
  if type(last) == 'table' then
    return out
  end
  return last
end

-- The Redis server's clock in ms: the one clock due times live on.
local function wq_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A flat reply {name_1, value_1, ...} (XINFO, a stream entry's fields) as a table name -> value.
local function wq_fields(flat)
  local t = {}
  for i = 1, #flat, 2 do
    t[flat[i]] = flat[i + 1]
  end
  return t
end

-- Stream ids "ms-seq" as {ms, seq}, and their order.
local function wq_id(s)
  local ms, seq = string.match(s, '^(%d+)-(%d+)$')
  return {tonumber(ms), tonumber(seq)}
end

local function wq_id_lt(a, b)
  local x, y = wq_id(a), wq_id(b)
  return x[1] < y[1] or (x[1] == y[1] and x[2] < y[2])
end
