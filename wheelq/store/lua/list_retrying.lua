--[[ list_retrying.lua — a page of one shard's pending retries in member (byte) order, after
a member, from the index of pending retries (retry.lua), read at one instant.
KEYS[1]  {T:s}:retries   ZSET    pending retries' members, score 0 (byte order)
KEYS[2]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[3]  {T:s}:jobs      HASH    job id -> envelope
ARGV[1]  the last member read ('': from the first)
ARGV[2]  rows, 1-1000
ARGV[3]  the largest envelope returned whole, bytes (a larger one comes back as its size;
         0: neither)
ARGV[4]  '1': each row carries its envelope's stamp too (wq_stamp: a bulk action's selection
         records it); absent or '': not
Returns: {0, more, member, due or false, envelope or size, [stamp or false,] ...}   rows in
           order; more: 1 when the index held ARGV[2] members past ARGV[1] (a member no
           longer pending has due false)
         {-1, key}   WRONG_TYPE
Includes: job_lists, status
]]
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash')
if wrong then return wrong end
local from = ARGV[1] == '' and '-' or '(' .. ARGV[1]
local count = tonumber(ARGV[2])
local members = redis.call('ZRANGE', KEYS[1], from, '+', 'BYLEX', 'LIMIT', 0, count)
local dues = #members > 0 and redis.call('ZMSCORE', KEYS[2], unpack(members)) or {}
return wq_list_rows(KEYS[3], members, dues, tonumber(ARGV[3]), {WQ_OK, #members == count and 1 or 0},
  nil, ARGV[4] == '1')
