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

  -- Crockford's letters from J on, as the letters of Lua's own base 32 (tonumber(s, 32):
  -- 0-9 then A-V): a generated id's 40-bit chunks are read by C, not a character at a time.
  local standard = {}
  for i = 19, 32 do
    standard[string.sub(WQ_B32, i, i)] = string.char(string.byte('A') + i - 11)
  end

  local function bytes(id)
    if #id ~= 26 or not string.find(id, '^[0-7][0-9A-HJKMNP-TV-Z]+$') then
      return nil
    end
    local s = string.gsub(id, '[J-Z]', standard)
    return struct.pack('>BI5I5I5', tonumber(string.sub(s, 1, 2), 32),
      tonumber(string.sub(s, 3, 10), 32), tonumber(string.sub(s, 11, 18), 32),
      tonumber(string.sub(s, 19, 26), 32))
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
