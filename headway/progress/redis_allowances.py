"""Clients' and spaces' allowances of progress in Redis: Lua that writes, deletes and counts
progress atomically, so that every instance sees one account per client address and one
per space, and that makes room in a full Redis by letting finished progress give way.

Each progress value starts with a header naming what it is counted as: its pool (`L`:
live, the progress of an unfinished task; `F`: finished), the bytes it is counted for,
its space, the client that wrote it and the time of the write (µs), then a newline and
the progress's JSON: `L640:5a1e…0000 203.0.113.7@1764000000000000\\n[5,10,{},1764…]`. A
value without a header (written before allowances were counted) is counted for no one; one
with the older header `L412 203.0.113.7\\n` (before spaces were) for its client only.

Per client address `c`, Redis keeps:
- `headway:client:<c>`, a hash: the bytes of its `live` and of its `kept` (finished)
  progress;
- `headway:live:<c>` and `headway:kept:<c>`, sorted sets of `"<uuid> <bytes>"` scored by
  the time of a write, so that what expired is found (the lowest scores) and uncounted
  without a scan, and so that its oldest finished progress can give way.
Per space `s`, the same for its live progress only (finished progress counts against no
space): `headway:space:<s>` (a hash, its field `live`) and `headway:space-live:<s>`.
And `headway:keepers`, the clients keeping finished progress scored by its bytes: who
gives way first when Redis is full.

A write uncounts what it replaces (whoever wrote it) from its client's and its space's
accounts, counts itself, and, for a new task, uncounts what of its client's and its
space's expired (at most 100 entries each, or 10,000 before refusing: accounts that are
written keep up with their own expiry). A live write is refused (nothing written) if it
would take its client over its allowance (`!client`), then if it would take its space over
its allowance (`!space`), under 90% of either for a new task, as in the memory store. A
finished write is never refused for an allowance: beyond its client's allowance of finished
progress, that client's oldest finished progress gives way (its key is deleted: it reads
as expired).

What a report costs Redis is kept near what it cost before spaces were counted: a value
is counted at the allocation Redis makes for it (its allocator's size class), so that
most reports change nothing counted; and a live member's score is moved on only by the
first write in each half of the TTL (`count`), so that a task reporting again at the same
size, within that half, finds its header as it left it and only writes its value: one
compare of the header, no account touched. Trims check the value of a member whose
score says it expired, and score it anew if it was written since. An account is set to
expire twice the TTL (and a minute) after a write that counts a new member in it or
scores one anew, so it outlives everything it counts.

Scripts that may grow what Redis holds are refused whole by a Redis at its maxmemory
(`#!lua`: never half run); those that only free or move what is held run all the same
(`allow-oom`), and `GIVE_WAY` brings a full Redis back under its maxmemory by deleting
finished progress, from the client keeping the most first, oldest first, as the memory
store does with its budget. Needs Redis 7 or Valkey (script flags).
"""

from __future__ import annotations

import re

from . import ADMIT_NEW_BELOW
from .redis_tracks import FOLLOW

# What a key costs Redis beside its value's allocation (`allocation`): the key's name, its
# entries in the keyspace and expiry dictionaries, its member in its client's sorted set
# and, while live, in its space's. Measured with INFO used_memory over 100,000 keys of one
# client (values of 104 and 1,104 bytes alike): a live key costs 404 bytes more in spaces
# of 10 tasks, 453 in one space of 100,000 (whose set is no longer a compact list); a
# finished one 309.
# A live key also has its track (`redis_tracks`): a key of its own, with its name and
# entries as above, and a packed value of at most 183 bytes (`estimates.pack`).
REDIS_TRACK_BYTES = 300
REDIS_ENTRY_BYTES = 450 + REDIS_TRACK_BYTES
REDIS_KEPT_ENTRY_BYTES = 310
# A client's address as counted: short, one line (an IPv6 /64 is at most 43 characters).
MAX_CLIENT = 64
# A value's header beside its identity: pool, bytes, time, separators; and the string's
# own header in Redis.
HEADER_BYTES = 28


# Lua helpers shared by the scripts below. An account is named by its hash and field (its
# bytes) and its sorted set (its members), and for a client's finished progress by the
# client as well (`keeper`, nil otherwise: it is ranked among keepers by those bytes):
# a client's, `headway:client:<c>` `live` or `kept` and `headway:<pool>:<c>`; a space's,
# `headway:space:<s>` `live` and `headway:space-live:<s>`. Names are passed as strings,
# not tables, and arguments turned into numbers only where needed: the report path pays
# for every table, string and closure a call makes.
HELPERS = """
local PREFIX = 'headway:progress:'
local KEEPERS = 'headway:keepers'
-- What a finished value is counted for less than a live one; the fraction of a budget under
-- which a new task is admitted.
local KEPT_LESS, ADMIT = $KEPT_LESS, $ADMIT
-- A time in µs as Redis takes it (a Lua number would be sent with 14 digits).
local function micros(number)
  return string.format('%.0f', number)
end
-- The pool, bytes, write time (µs), client and space of a value whose first bytes are
-- `head` (nil if it has no header; time and space nil if written before spaces counted).
local function parse(head)
  local kind, size, space, client, at =
    string.match(head, '^([LF])(%d+):(%S+) ([^@\\n]*)@(%d+)\\n')
  if kind == nil then
    kind, size, client = string.match(head, '^([LF])(%d+) ([^\\n]*)\\n')
    if kind == nil then return nil end
  end
  return kind, tonumber(size), tonumber(at), client, space
end
local function held(key)
  return parse(redis.call('GETRANGE', key, 0, 191))
end
local function holds(h, f)
  return tonumber(redis.call('HGET', h, f) or '0')
end
local function add(h, f, keeper, delta)
  local left = redis.call('HINCRBY', h, f, delta)
  if keeper then
    if left > 0 then
      redis.call('ZADD', KEEPERS, left, keeper)
    else
      redis.call('ZREM', KEEPERS, keeper)
    end
  end
  return left
end
-- Uncount at most `most` of the account's members that expired by `cutoff`. A member's
-- score is the time of a write of its value no later than the last (see `count`): one
-- whose value was written since the cutoff is scored anew instead. `kind` and `client`
-- or `space`: what the account counts (nil: any).
local function trim(h, f, z, keeper, cutoff, most, kind, client, space)
  local found = redis.call('ZRANGEBYSCORE', z, '-inf', micros(cutoff), 'LIMIT', 0, most)
  if #found == 0 then return end
  local gone, freed = {}, 0
  for _, member in ipairs(found) do
    local uuid, size = string.match(member, '^(%S+) (%d+)$')
    size = tonumber(size)
    local okind, osize, oat, oclient, ospace = held(PREFIX .. uuid)
    if okind == kind and osize == size and oat and oat > cutoff
        and (client == nil or oclient == client) and (space == nil or ospace == space) then
      redis.call('ZADD', z, micros(oat), member)
    else
      gone[#gone + 1] = member
      freed = freed + size
    end
  end
  if #gone == 0 then return end
  add(h, f, keeper, -freed)
  for at = 1, #gone, 1000 do
    redis.call('ZREM', z, unpack(gone, at, math.min(at + 999, #gone)))
  end
end
local function uncount(h, f, z, keeper, uuid, size)
  if redis.call('ZREM', z, uuid .. ' ' .. size) == 1 then add(h, f, keeper, -size) end
end
-- Uncount a value (of pool `kind`, `size` bytes) from its client's account and, given its
-- space, from its space's.
local function uncount_value(uuid, kind, size, client, space)
  if kind == 'L' then
    uncount('headway:client:' .. client, 'live', 'headway:live:' .. client, nil, uuid, size)
    if space then
      uncount('headway:space:' .. space, 'live', 'headway:space-live:' .. space, nil, uuid, size)
    end
  else
    uncount('headway:client:' .. client, 'kept', 'headway:kept:' .. client, client, uuid, size)
  end
end
-- Count `uuid` at `size`, written at `now`, in an account that counted it at `osize` (nil:
-- not at all), moved by the difference (or by the whole, if what it replaces expired and
-- was uncounted already). A member is scored `now` when it is new, or `fresh` (its value
-- last written in an earlier half of the TTL): its score is never more than half a TTL
-- older than its value's last write.
local function count(h, f, z, keeper, uuid, size, osize, now, fresh)
  local member = uuid .. ' ' .. size
  if osize ~= nil and osize ~= size then
    local had = redis.call('ZREM', z, uuid .. ' ' .. osize)
    add(h, f, keeper, size - had * osize)
    redis.call('ZADD', z, now, member)
  elseif osize == nil or fresh then
    if redis.call('ZADD', z, now, member) == 1 then add(h, f, keeper, size) end
  end
end
-- Whether `more` bytes would take a live account (`h` `live`, `z`; `client`'s or `space`'s)
-- over `cap` (90% of it for a `new` task), once what of it expired by `cutoff` is uncounted:
-- for a new task at most 100 members first, and 10,000 if it looks over.
local function over(h, z, cutoff, more, cap, new, client, space)
  cap = tonumber(cap)
  if new then
    cap = math.floor(cap * ADMIT)
    trim(h, 'live', z, nil, cutoff, 100, 'L', client, space)
  end
  if holds(h, 'live') + more <= cap then return false end
  trim(h, 'live', z, nil, cutoff, 10000, 'L', client, space)
  return holds(h, 'live') + more > cap
end
local function expire(seconds, a, b, c)
  redis.call('EXPIRE', a, seconds)
  redis.call('EXPIRE', b, seconds)
  if c then redis.call('EXPIRE', c, seconds) end
end
-- Let a member of a client's finished progress give way: uncounted, and its key deleted
-- if the key still holds what the member counts (a key that expired may have been
-- written again since). The bytes freed in Redis.
local function give_way(client, member)
  local uuid, size = string.match(member, '^(%S+) (%d+)$')
  size = tonumber(size)
  redis.call('ZREM', 'headway:kept:' .. client, member)
  add('headway:client:' .. client, 'kept', client, -size)
  local kind, osize, _, oclient = held(PREFIX .. uuid)
  if kind == 'F' and osize == size and oclient == client then
    redis.call('UNLINK', PREFIX .. uuid)
    return size
  end
  return 0
end
-- Write a report at `key` with the arguments from ARGV[o + 1] (see `write_args`); returns
-- '!client' or '!space' (nothing written) if the client's or the space's allowance has no room
-- for it, else false.
local function write_at(key, o)
  local json, now, kind, size = ARGV[o + 1], ARGV[o + 3], ARGV[o + 4], ARGV[o + 5]
  local ident = ARGV[o + 6]
  local head = redis.call('GETRANGE', key, 0, 191)
  local ttl = tonumber(ARGV[o + 2])
  local at = tonumber(now)
  local half = at - at % (ttl * 500000)  -- the start of this half of the TTL
  -- A live task reporting again, by the client that last wrote it, at the same size and
  -- in the same half of the TTL as then: its accounts count it as they are.
  local expect = kind .. size .. ident
  if kind == 'L' and string.sub(head, 1, #expect) == expect then
    local oat = tonumber(string.match(head, '^(%d+)\\n', #expect + 1))
    if oat and oat >= half then
      redis.call('SET', key, expect .. now .. '\\n' .. json, 'EX', ttl)
      follow_at(string.sub(key, #PREFIX + 1), now, ARGV[o + 9], ARGV[o + 10], ttl)
      return false
    end
  end
  local space, client = string.match(ident, '^:(%S+) ([^@\\n]*)@$')
  local cutoff = at - ttl * 1000000
  local uuid = string.sub(key, #PREFIX + 1)
  local okind, osize, oat, oclient, ospace = parse(head)
  size = tonumber(size)
  if okind == 'F' and kind == 'L' then kind, size = 'F', size - KEPT_LESS end
  local ch, cl = 'headway:client:' .. client, 'headway:live:' .. client
  local same_space = okind == 'L' and ospace == space
  local sh, sz
  if kind == 'L' then
    local rewrite = okind == 'L' and oclient == client
    local mine = size
    if rewrite then mine = size - osize end
    if mine > 0 and over(ch, cl, cutoff, mine, ARGV[o + 7], not rewrite, client) then
      return '!client'
    end
    -- The space's allowance: what the write adds to the space's live progress, whoever held
    -- the task before; under 90% of it for a new task.
    sh, sz = 'headway:space:' .. space, 'headway:space-live:' .. space
    local growth = size
    if same_space then growth = size - osize end
    if growth > 0 and over(sh, sz, cutoff, growth, ARGV[o + 8], not okind, nil, space) then
      return '!space'
    end
  end
  redis.call('SET', key, kind .. size .. ident .. now .. '\\n' .. json, 'EX', ttl)
  if kind == 'L' then
    follow_at(uuid, now, ARGV[o + 9], ARGV[o + 10], ttl)
  else
    redis.call('UNLINK', TRACK .. uuid)
  end
  -- Accounts outlive everything they count: set to expire twice the TTL (and a minute)
  -- after each write that counts a new member or scores one anew (see `count`).
  local fresh = kind == 'F' or oat == nil or oat < half
  local long = 2 * ttl + 60
  local ck = 'headway:kept:' .. client
  local f, z, keeper = 'live', cl, nil
  if kind == 'F' then f, z, keeper = 'kept', ck, client end
  -- The client's account counted the value it replaces (`same`), or is new to it.
  local same = okind == kind and oclient == client
  if okind and not same then uncount_value(uuid, okind, osize, oclient) end
  count(ch, f, z, keeper, uuid, size, same and osize or nil, now, fresh)
  if fresh or not same then expire(long, ch, cl, ck) end
  if okind == 'L' and ospace and not (kind == 'L' and same_space) then
    uncount('headway:space:' .. ospace, 'live', 'headway:space-live:' .. ospace, nil, uuid, osize)
  end
  if kind == 'L' then
    count(sh, 'live', sz, nil, uuid, size, same_space and osize or nil, now, fresh)
    if fresh or not same_space then expire(long, sh, sz) end
    return false
  end
  trim(ch, 'kept', ck, client, cutoff, 100, 'F', client)
  local kept, limit = holds(ch, 'kept'), tonumber(ARGV[o + 7])
  while kept > limit do
    -- The oldest two: never the one just written (written in the same µs, say).
    local two = redis.call('ZRANGE', ck, 0, 1)
    local oldest = two[1]
    if string.match(oldest, '^(%S+) ') == uuid then oldest = two[2] end
    if oldest == nil then break end
    give_way(client, oldest)
    kept = holds(ch, 'kept')
  end
  -- Keepers whose accounts expired are forgotten: two looked at for each finish keep
  -- them fewer than the keepers that are not.
  for _, other in ipairs(redis.call('ZRANDMEMBER', KEEPERS, 2)) do
    if redis.call('EXISTS', 'headway:client:' .. other) == 0 then
      redis.call('ZREM', KEEPERS, other)
    end
  end
  return false
end
"""
HELPERS = FOLLOW + HELPERS  # `write_at` follows each live task's track
HELPERS = HELPERS.replace("$KEPT_LESS", str(REDIS_ENTRY_BYTES - REDIS_KEPT_ENTRY_BYTES))
HELPERS = HELPERS.replace("$ADMIT", str(ADMIT_NEW_BELOW))

# Script flags (Redis 7, Valkey): refused whole by a Redis at its maxmemory, or run all the
# same (for scripts that only free or move what is held).
GROWS = "#!lua\n"
FREES = "#!lua flags=allow-oom\n"


def freeing(body: str) -> str:
    """A script that only frees or moves what is held: the helpers, then `body`, run
    by a Redis at its maxmemory too (FREES)."""
    return FREES + HELPERS + body


# The arguments of a write, in `write_at`'s order, after any of the script's own.
WRITE_ARGS = 10

# KEYS[1]: the progress key. ARGV: a write's (see `write_args`).
PUT = GROWS + HELPERS + "return write_at(KEYS[1], 0)"

# KEYS: the progress keys to delete. Each value's bytes are uncounted for its writer and,
# if live, for its space.
DELETE = freeing(
    """
for _, key in ipairs(KEYS) do
  local kind, size, _, client, space = held(key)
  local uuid = string.sub(key, #PREFIX + 1)
  if kind then uncount_value(uuid, kind, size, client, space) end
  redis.call('UNLINK', key, TRACK .. uuid)
end
return 0
"""
)

# KEYS: progress keys of tasks that finished without a write (a parent finished by its
# last step). Each live value becomes finished, counted as its writer's kept progress (as of its
# last write), and no longer counted for its space.
RELEASE = freeing(
    """
for _, key in ipairs(KEYS) do
  local kind, size, at, client, space = held(key)
  if kind == 'L' then
    local uuid = string.sub(key, #PREFIX + 1)
    local counted = redis.call('ZSCORE', 'headway:live:' .. client, uuid .. ' ' .. size)
    uncount_value(uuid, kind, size, client, space)
    redis.call('UNLINK', TRACK .. uuid)
    if counted then
      local kept_size = size - KEPT_LESS
      local value = redis.call('GET', key)
      local rest = string.match(value, '^L%d+(.*)$')
      redis.call('SET', key, 'F' .. kept_size .. rest, 'KEEPTTL')
      local h, z = 'headway:client:' .. client, 'headway:kept:' .. client
      redis.call('ZADD', z, at and micros(at) or counted, uuid .. ' ' .. kept_size)
      add(h, 'kept', client, kept_size)
      local ttl = redis.call('PTTL', h)
      if ttl > 0 then redis.call('PEXPIRE', z, ttl) end
    end
  end
end
return 0
"""
)

# ARGV: the client, the expiry cutoff (µs), its allowance. 1 if it holds 90% of that or more
# (no room for a new task: `over` by a byte), after uncounting what expired; else 0.
ADMIT_CLIENT = freeing(
    """
local h, z = 'headway:client:' .. ARGV[1], 'headway:live:' .. ARGV[1]
if over(h, z, tonumber(ARGV[2]), 1, ARGV[3], true, ARGV[1]) then return 1 end
return 0
"""
)

# ARGV[1]: the fraction of maxmemory to free beyond what is over it. A Redis over its
# maxmemory (less that fraction) deletes finished progress until it is back under it: the
# client keeping the most gives way first, its oldest first, down to the next keeper's
# level, as the memory store does. Returns the bytes freed (as counted: 0 if there was no
# finished progress to give), or -1 if Redis had that much room already (or no
# maxmemory).
GIVE_WAY = freeing(
    """
local info = redis.call('INFO', 'memory')
local used = tonumber(string.match(info, 'used_memory:(%d+)'))
local most = tonumber(string.match(info, 'maxmemory:(%d+)') or '0')
if most == 0 then return -1 end
local need = used - most + math.floor(most * tonumber(ARGV[1]))
if need <= 0 then return -1 end
local freed = 0
while freed < need do
  local top = redis.call('ZREVRANGE', KEEPERS, 0, 1, 'WITHSCORES')
  if #top == 0 then break end
  local client, floor = top[1], tonumber(top[4] or '0')
  local h, z = 'headway:client:' .. client, 'headway:kept:' .. client
  local oldest = redis.call('ZRANGE', z, 0, 0)[1]
  if oldest == nil then
    redis.call('ZREM', KEEPERS, client)  -- its account expired: nothing to give
  else
    repeat
      freed = freed + give_way(client, oldest)
      oldest = redis.call('ZRANGE', z, 0, 0)[1]
    until oldest == nil or freed >= need or holds(h, 'kept') <= floor
  end
end
return freed
"""
)

ALLOWANCE_FULL = b"!client"
SPACE_FULL = b"!space"


def allocation(size: int) -> int:
    """The bytes Redis's allocator (jemalloc) sets aside for `size` bytes: its size class,
    four to each doubling above 128 bytes."""
    if size <= 8:
        return 8
    if size <= 128:
        return -(-size // 16) * 16
    step = 1 << ((size - 1).bit_length() - 3)
    return -(-size // step) * step


def write_args(
    json: bytes,
    ttl_s: int,
    now_us: int,
    client: str,
    finished: bool,
    client_bytes: int,
    space: str,
    space_bytes: int,
    current: str = "",
    end: str = "",
) -> list[object]:
    """The arguments of a write (`write_at` in Lua), in order; `current` and `end` for
    the task's track, as text ('' for none; `current` `redis_tracks.OFF`: no track)."""
    identity = f":{account_name(space)} {account_name(client)}@"
    stored = allocation(HEADER_BYTES + len(identity) + len(json))
    return [
        json,
        ttl_s,
        now_us,
        "F" if finished else "L",
        (REDIS_KEPT_ENTRY_BYTES if finished else REDIS_ENTRY_BYTES) + stored,
        identity,
        client_bytes,
        space_bytes,
        current,
        end,
    ]


_PLAIN_NAME = re.compile(rf"[^\s@]{{1,{MAX_CLIENT}}}")


def account_name(text: str) -> str:
    """A client or a space as its accounts are named: one word of at most MAX_CLIENT
    characters (a header separates them with a space and an `@`)."""
    if _PLAIN_NAME.fullmatch(text):
        return text
    return re.sub(r"[\s@]", "_", text[:MAX_CLIENT]) or "_"


def value_json(raw: bytes) -> bytes | memoryview:
    """The progress's JSON in a value as stored (after its header, if it has one)."""
    if raw[:1] == b"[":
        return raw
    return memoryview(raw)[raw.index(b"\n") + 1 :]
