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
  local letters = {} -- a value -> its character
  for i = 1, 32 do
    letters[i - 1] = string.sub(WQ_B32, i, i)
  end

  -- A byte's value as a Crockford digit; any other byte's is 2^45, which no chunk of a
  -- generated id reaches: one look decides both (a chunk of 8 digits is under 2^40; the first
  -- two, a digit 0-7 and any, under 256). The id's bytes are read in one call and each chunk
  -- added up in one expression: a character at a time in a loop, or the letters translated by
  -- gsub for tonumber(s, 32), cost Lua 2-3 times as much.
  local v = {}
  for b = 0, 255 do
    v[b] = 2 ^ 45
  end
  for i = 1, 32 do
    v[string.byte(WQ_B32, i)] = i - 1
  end

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

  local function text(raw)
    local first = string.byte(raw, 1)
    local chars = {letters[math.floor(first / 32)], letters[first % 32]}
    for chunk = 0, 2 do
      local n = struct.unpack('>I5', raw, 2 + chunk * 5)
      for i = 10 + chunk * 8, 3 + chunk * 8, -1 do
        local d = n % 32
        chars[i] = letters[d]
        n = (n - d) / 32
      end
    end
    return table.concat(chars)
  end

  return bytes, text
end
