"""Each live task's track of reports in Redis (see `headway.domain.estimates`): the Lua that
follows it as the report is written, in the same script, so that every instance extends
the same track.

`follow_at` is `estimates.follow` in Lua, rule for rule, on the same packed form
(`estimates.pack`: a MessagePack array, which Redis's Lua reads and writes with
`cmsgpack`); `tests/test_tracks.py` holds the two to the same tracks. The track is kept
at `headway:track:<uuid>`, with the same TTL as the task's progress, and goes with it:
deleted with a task, and when it finishes (`redis_allowances`). Its bytes are counted
in the live entry's (`redis_allowances.REDIS_TRACK_BYTES`).
"""

from __future__ import annotations

from ..domain.estimates import ANCHORS, MIN_GAP_US, SILENCE_APART

TRACK_PREFIX = "headway:track:"
# What a write passes for `current` when no track is kept (estimates off).
OFF = "off"

# `follow_at(uuid, now, current, end, ttl)`: `now` in µs, `current` and `end` as text
# ('' for none; `current` OFF: nothing done), `ttl` in seconds. The array: started,
# start, reports, end (false: none), then the anchors' instants and counts, flat.
FOLLOW = f"""
local TRACK = '{TRACK_PREFIX}'
local function apart(t)
  local most = 0
  for i = 5, #t - 3, 2 do
    local gap = t[i + 2] - t[i]
    if gap > most then most = gap end
  end
  return most
end
local function follow_at(uuid, now, current, e, ttl)
  if current == '{OFF}' then return end
  local key = TRACK .. uuid
  if current == '' then
    redis.call('UNLINK', key)
    return
  end
  now, current = tonumber(now), tonumber(current)
  if e == '' then e = false else e = tonumber(e) end
  local packed = redis.call('GET', key)
  local t = packed and cmsgpack.unpack(packed)
  local n = t and #t or 0
  -- Its last report is a TTL old (on the writers' clock): it expired with its progress.
  if t and now - t[n - 1] >= ttl * 1000000 then t = false end
  if not t or t[4] ~= e or current < t[n] or now < t[n - 1] then
    t = {{now, current, 1, e, now, current}}
  elseif n >= 10 and now - t[n - 1] > {SILENCE_APART} * apart(t) then
    t = {{t[1], t[2], t[3] + 1, e, now, current}}
  else
    t[3] = t[3] + 1
    local gap = math.max({MIN_GAP_US}, math.floor((now - t[1]) / {2 * ANCHORS}))
    if n >= 8 and now - t[n - 3] < gap then
      t[n - 1], t[n] = now, current
    else
      t[n + 1], t[n + 2] = now, current
      if n - 2 > {2 * ANCHORS} then
        table.remove(t, 5)
        table.remove(t, 5)
      end
    end
  end
  redis.call('SET', key, cmsgpack.pack(t), 'EX', ttl)
end
"""
