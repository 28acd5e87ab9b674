--[[ includes/ids.lua — a generated job id in 16 bytes and back (wheelq.core.ids makes them:
26 Crockford base32 characters, the first 0-7, 128 bits): the far tier's records and the key
index's entries hold ids so.
Includes: none
]]
-- The codec's two functions, made only by a call that packs or unpacks an id (each local
-- function of a script is a closure made on every call): bytes(id) is the id's 16 bytes, or
-- nil when it is not a generated id; text(raw) is the id again. A byte holds the first two
-- characters, then 5 bytes each 8 characters.
local function wq_id_codec()
  local WQ_B32 = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'
  -- A byte's value as a Crockford digit; any other byte's is 2^45, which no chunk of a
  -- generated id reaches: one look decides both (a chunk of 8 digits is under 2^40; the first
  -- two, a digit 0-7 and any, under 256). The id's bytes are read in one call and each chunk
  -- added up in one expression: a character at a time in a loop, or the letters translated by
  -- gsub for tonumber(s, 32), cost Lua 2-3 times as much. Tables are filled as used: the
  -- codec is made on each call that needs it, for one id as often as for thousands.
  local v = setmetatable({}, {__index = function()
    return 2 ^ 45
  end})
  for i = 1, 32 do
    v[string.byte(WQ_B32, i)] = i - 1
  end
  -- Two digits (a value under 1024) as their two characters, each made the first time.
  local pairs_of = setmetatable({}, {__index = function(t, n)
    local low = n % 32
    local s = string.char(string.byte(WQ_B32, (n - low) / 32 + 1), string.byte(WQ_B32, low + 1))
    t[n] = s
    return s
  end})

  local function bytes(id)
    if #id ~= 26 then
      return nil
    end
    local c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17, c18, c19,
      c20, c21, c22, c23, c24, c25, c26 = string.byte(id, 1, 26)
    local a = v[c1] * 32 + v[c2]
    local b = ((((((v[c3] * 32 + v[c4]) * 32 + v[c5]) * 32 + v[c6]) * 32
      + v[c7]) * 32 + v[c8]) * 32 + v[c9]) * 32 + v[c10]
    local c = ((((((v[c11] * 32 + v[c12]) * 32 + v[c13]) * 32 + v[c14]) * 32
      + v[c15]) * 32 + v[c16]) * 32 + v[c17]) * 32 + v[c18]
    local d = ((((((v[c19] * 32 + v[c20]) * 32 + v[c21]) * 32 + v[c22]) * 32
      + v[c23]) * 32 + v[c24]) * 32 + v[c25]) * 32 + v[c26]
    if a < 256 and b < 1099511627776 and c < 1099511627776 and d < 1099511627776 then
      return struct.pack('>BI5I5I5', a, b, c, d)
    end
    return nil
  end

  -- A 40-bit chunk's four pairs of digits, most significant first.
  local function quarters(n)
    local q4 = n % 1024
    n = (n - q4) / 1024
    local q3 = n % 1024
    n = (n - q3) / 1024
    local q2 = n % 1024
    return (n - q2) / 1024, q2, q3, q4
  end

  local function text(raw)
    local a, b, c, d = struct.unpack('>BI5I5I5', raw)
    local b1, b2, b3, b4 = quarters(b)
    local c1, c2, c3, c4 = quarters(c)
    local d1, d2, d3, d4 = quarters(d)
    local p = pairs_of
    return p[a] .. p[b1] .. p[b2] .. p[b3] .. p[b4] .. p[c1] .. p[c2] .. p[c3] .. p[c4]
      .. p[d1] .. p[d2] .. p[d3] .. p[d4]
  end

  return bytes, text
end
