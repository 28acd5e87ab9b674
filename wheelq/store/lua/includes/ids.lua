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
  local digits, letters = {}, {} -- a character's byte -> its value, and a value -> the character
  for i = 1, 32 do
    digits[string.byte(WQ_B32, i)], letters[i - 1] = i - 1, string.sub(WQ_B32, i, i)
  end

  local function bytes(id)
    if #id ~= 26 or not string.find(id, '^[0-7][0-9A-HJKMNP-TV-Z]+$') then
      return nil
    end
    local b = {string.byte(id, 1, 26)}
    local out = {string.char(digits[b[1]] * 32 + digits[b[2]])}
    for chunk = 0, 2 do
      local n = 0
      for i = 3 + chunk * 8, 10 + chunk * 8 do
        n = n * 32 + digits[b[i]]
      end
      out[chunk + 2] = struct.pack('>I5', n)
    end
    return table.concat(out)
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
