--[[ includes/job_lists.lua — what the job lists read (docs/architecture.md, "Job lists"): a
row a job (wq_list_rows), an envelope's stamp (wq_stamp), and rows in a sorted set's order
(wq_sort_rows; wq_bytes_before for members of one score).
Includes: none
]]
-- Whether member `a` sorts before `b` in byte order (memcmp), as a sorted set orders members
-- of one score; Lua's own < on strings follows the locale.
local function wq_bytes_before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- Sort `rows` (each {due, member, ...}) as a sorted set orders its members: by due, then by
-- member in byte order, so a page ends where the sorted set's own order would end it.
local function wq_sort_rows(rows)
  table.sort(rows, function(a, b)
    if a[1] ~= b[1] then
      return a[1] < b[1]
    end
    return wq_bytes_before(a[2], b[2])
  end)
end

-- A pending job's stamp: which write put its envelope there, as 16 hex digits of the
-- envelope's SHA1 (an envelope holds the payload, the options and the client's ms of the
-- enqueue, so a job enqueued again under its id has another stamp unless every byte is the
-- same). A bulk action's selection records it with the job's due time, and its act goes on
-- only while both are the same (wq_as_selected; docs/architecture.md, "Bulk actions").
local function wq_stamp(envelope)
  return string.sub(redis.sha1hex(envelope), 1, 16)
end

-- A job list's rows: for each member of `members` (in order), the member, its due ms
-- (`dues[i]`, false: not pending) and its envelope, or its size in bytes when it is larger
-- than `max` (a list never copies a huge payload), appended to `out`. `max` 0: neither
-- (false), for a caller that needs ids and due times only. The envelope is read from `jobs`
-- unless `held[i]` has it already (a far record's). With `stamps`, each row has a fourth
-- value: its envelope's stamp (wq_stamp; false: none).
local function wq_list_rows(jobs, members, dues, max, out, held, stamps)
  for i, member in ipairs(members) do
    out[#out + 1] = member
    out[#out + 1] = dues[i]
    local envelope = held and held[i]
    if stamps and not envelope then
      envelope = redis.call('HGET', jobs, member)
    end
    if max <= 0 then
      out[#out + 1] = false
    elseif envelope then
      out[#out + 1] = #envelope > max and #envelope or envelope
    else
      local size = redis.call('HSTRLEN', jobs, member)
      if size > max then
        out[#out + 1] = size
      else
        out[#out + 1] = redis.call('HGET', jobs, member) or false
      end
    end
    if stamps then
      out[#out + 1] = envelope and wq_stamp(envelope) or false
    end
  end
  return out
end
