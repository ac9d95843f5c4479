"""Clients' shares of progress in Redis: Lua that writes, deletes and counts progress
atomically, so that every instance sees one account per client address.

Each progress value starts with a header naming what it is counted as: its pool (`L`:
live, the progress of an unfinished task; `F`: finished), the bytes it is counted for,
and the client that wrote it, then a newline and the progress's JSON:
`L412 203.0.113.7\\n[5,10,{"log":"x"},1764000000000000]`. A value without a header (written
before shares were counted) is counted for no one.

Per client address `c`, Redis keeps:
- `headway:client:<c>`, a hash: the bytes of its `live` and of its `kept` (finished)
  progress;
- `headway:live:<c>` and `headway:kept:<c>`, sorted sets of `"<uuid> <bytes>"` scored by
  the write's time (µs), so that what expired is found (the lowest scores) and uncounted
  without a scan, and so that its oldest finished progress can give way.
All three are written together and expire together, `ttl` + 60 s after the client's last
write, when everything they count has expired too.

A write by its client uncounts what it replaces (whoever wrote it), counts itself, and
uncounts what of its client's expired (at most 100 entries, or 10,000 before refusing: a
client that writes keeps up with its own expiry). A live write is refused (nothing
written) if it would take its client over its share, under 90% of it for a new task, as
in the memory store. A finished write is never refused: beyond its client's share of
finished progress, that client's oldest finished progress gives way (its key is deleted:
it reads as expired). Costs on the report path: a few commands on small keys, in the one
round trip the write already makes.
"""

from __future__ import annotations

# Lua helpers shared by the scripts below. `held(key)`: the pool, bytes and client of
# the value at `key` (nil if none, or written without a header).
HELPERS = """
local PREFIX = 'headway:progress:'
local function held(key)
  local head = redis.call('GETRANGE', key, 0, 191)
  local kind, size, client = string.match(head, '^([LF])(%d+) ([^\\n]*)\\n')
  if kind == nil then return nil end
  return kind, tonumber(size), client
end
local function pool_of(kind)
  if kind == 'L' then return 'live' end
  return 'kept'
end
local function holds(client, pool)
  return tonumber(redis.call('HGET', 'headway:client:' .. client, pool) or '0')
end
-- Uncount at most `most` of the client's entries of `pool` that expired by `cutoff`.
local function trim(client, pool, cutoff, most)
  local z = 'headway:' .. pool .. ':' .. client
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', cutoff, 'LIMIT', 0, most)
  if #gone == 0 then return end
  local freed = 0
  for at = 1, #gone, 1000 do
    local batch = {}
    for n = at, math.min(at + 999, #gone) do
      batch[#batch + 1] = gone[n]
      freed = freed + tonumber(string.match(gone[n], ' (%d+)$'))
    end
    redis.call('ZREM', z, unpack(batch))
  end
  redis.call('HINCRBY', 'headway:client:' .. client, pool, -freed)
end
local function uncount(client, pool, uuid, size)
  if redis.call('ZREM', 'headway:' .. pool .. ':' .. client, uuid .. ' ' .. size) == 1 then
    redis.call('HINCRBY', 'headway:client:' .. client, pool, -size)
  end
end
-- Write `json` at `key` for `client`; '!share' (nothing written) if the client's share
-- has no room for it, else false.
local function write(key, json, ttl, now, cutoff, client, kind, size, limit, limit_new)
  local uuid = string.sub(key, #PREFIX + 1)
  local okind, osize, oclient = held(key)
  if okind == 'F' then kind = 'F' end
  if kind == 'L' then
    local rewrite = okind == 'L' and oclient == client
    local mine, cap = size, limit_new
    if rewrite then mine, cap = size - osize, limit end
    if mine > 0 then
      trim(client, 'live', cutoff, 100)
      if holds(client, 'live') + mine > cap then
        trim(client, 'live', cutoff, 10000)
        if holds(client, 'live') + mine > cap then return '!share' end
      end
    end
  end
  if okind then uncount(oclient, pool_of(okind), uuid, osize) end
  redis.call('SET', key, kind .. size .. ' ' .. client .. '\\n' .. json, 'EX', ttl)
  local pool = pool_of(kind)
  local z, h = 'headway:' .. pool .. ':' .. client, 'headway:client:' .. client
  redis.call('ZADD', z, now, uuid .. ' ' .. size)
  redis.call('HINCRBY', h, pool, size)
  redis.call('EXPIRE', h, ttl + 60)
  redis.call('EXPIRE', 'headway:live:' .. client, ttl + 60)
  redis.call('EXPIRE', 'headway:kept:' .. client, ttl + 60)
  if kind == 'F' then
    trim(client, 'kept', cutoff, 100)
    local kept = holds(client, 'kept')
    while kept > limit do
      -- The oldest two: never the one just written (written in the same µs, say).
      local two = redis.call('ZRANGE', z, 0, 1)
      local oldest = two[1]
      if string.match(oldest, '^(%S+) ') == uuid then oldest = two[2] end
      if oldest == nil then break end
      local ouuid, osz = string.match(oldest, '^(%S+) (%d+)$')
      redis.call('ZREM', z, oldest)
      redis.call('UNLINK', PREFIX .. ouuid)
      kept = kept - tonumber(osz)
      redis.call('HINCRBY', h, 'kept', -tonumber(osz))
    end
  end
  return false
end
local function write_at(key, o)
  return write(key, ARGV[o + 1], tonumber(ARGV[o + 2]), ARGV[o + 3], ARGV[o + 4], ARGV[o + 5],
    ARGV[o + 6], tonumber(ARGV[o + 7]), tonumber(ARGV[o + 8]), tonumber(ARGV[o + 9]))
end
"""

# The arguments of a write, in `write_at`'s order, after any of the script's own.
WRITE_ARGS = 9

# KEYS[1]: the progress key. ARGV: a write's (see `write_args`).
PUT = HELPERS + "return write_at(KEYS[1], 0)"

# KEYS: the progress keys to delete. Each value's bytes are uncounted for its writer.
DELETE = (
    HELPERS
    + """
for _, key in ipairs(KEYS) do
  local kind, size, client = held(key)
  if kind then uncount(client, pool_of(kind), string.sub(key, #PREFIX + 1), size) end
  redis.call('UNLINK', key)
end
return 0
"""
)

# KEYS: progress keys of tasks that finished without a write (a parent finished by its
# last step): each live value becomes finished, counted as its writer's kept progress.
RELEASE = (
    HELPERS
    + """
for _, key in ipairs(KEYS) do
  local kind, size, client = held(key)
  if kind == 'L' then
    local member = string.sub(key, #PREFIX + 1) .. ' ' .. size
    local score = redis.call('ZSCORE', 'headway:live:' .. client, member)
    if score then
      uncount(client, 'live', string.sub(key, #PREFIX + 1), size)
      redis.call('SETRANGE', key, 0, 'F')
      local kept, h = 'headway:kept:' .. client, 'headway:client:' .. client
      redis.call('ZADD', kept, score, member)
      redis.call('HINCRBY', h, 'kept', size)
      local ttl = redis.call('PTTL', h)
      if ttl > 0 then redis.call('PEXPIRE', kept, ttl) end
    end
  end
end
return 0
"""
)

# ARGV: the client, the expiry cutoff (µs), the most it may hold for a new task to be
# admitted. 1 if it holds that much or more (after uncounting what expired), else 0.
ADMIT_CLIENT = (
    HELPERS
    + """
local client, cutoff, cap = ARGV[1], ARGV[2], tonumber(ARGV[3])
trim(client, 'live', cutoff, 100)
if holds(client, 'live') < cap then return 0 end
trim(client, 'live', cutoff, 10000)
if holds(client, 'live') < cap then return 0 end
return 1
"""
)

SHARE_FULL = b"!share"

# What a key and its value cost Redis beyond the value's JSON: the key's name, its
# entries in the keyspace and expiry dictionaries, the header, and its member in its
# client's sorted set (measured with INFO used_memory over 100,000 keys: 376 bytes with
# 35 bytes of JSON).
REDIS_ENTRY_BYTES = 340
# A client's address as counted: short, one line (an IPv6 /64 is at most 43 characters).
MAX_CLIENT = 64


def write_args(
    json: bytes,
    ttl_s: int,
    now_us: int,
    ttl_us: int,
    client: str,
    finished: bool,
    client_bytes: int,
    admit_below: float,
) -> list[object]:
    """The arguments of a write (`write_at` in Lua), in order."""
    return [
        json,
        ttl_s,
        now_us,
        now_us - ttl_us,
        client[:MAX_CLIENT].replace("\n", " "),
        "F" if finished else "L",
        REDIS_ENTRY_BYTES + len(json),
        client_bytes,
        int(client_bytes * admit_below),
    ]


def value_json(raw: bytes) -> bytes | memoryview:
    """The progress's JSON in a value as stored (after its header, if it has one)."""
    if raw[:1] == b"[":
        return raw
    return memoryview(raw)[raw.index(b"\n") + 1 :]
