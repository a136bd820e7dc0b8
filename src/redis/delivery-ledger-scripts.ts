import { redisScript } from './redis-support.js';

/**
 * The Lua of `RedisDeliveryLedger`, one script per call, each on the one hash of a message id
 * (KEYS[1], `<prefix>:ledger:<messageId>`), so a call is atomic and any key prefix works on a
 * Redis Cluster.
 *
 * @remarks
 * Fields: `c|<queue>` = `<token>|<state>|<expiresAt>`, the token the queue delivers (state
 * `active`, `waiting` or `done`); `s|<token>|<queue>` = `<state>|<deliverAt>|<expiresAt>`, a
 * scheduled copy (`pending`, `taken` or `cancelled`); `l|<queue>` =
 * `<token>|<deliveryCount>|<excusedEnds>|<lostAt>|<expiresAt>`, the latest loss of the queue's
 * copy in an outage (`lost`, forgotten by `settle` and `takeLoss`); `a|<queue>` = when the queue's
 * claim was last admitted (`lost` records nothing dropped before it); `x` = the latest `expiresAt` of the hash,
 * which the key's TTL follows (plus a grace), so nothing outlives its last record. Times are the
 * caller's clock, passed in ARGV; a field past its `expiresAt` counts as absent.
 */
const PRELUDE = `
local function split3(value)
  local a = string.find(value, '|', 1, true)
  local b = string.find(value, '|', a + 1, true)
  return string.sub(value, 1, a - 1), string.sub(value, a + 1, b - 1), string.sub(value, b + 1)
end
local function keep(key, expiresAt, now, grace)
  local latest = redis.call('HGET', key, 'x')
  if not latest or tonumber(expiresAt) > tonumber(latest) then
    redis.call('HSET', key, 'x', expiresAt)
    latest = expiresAt
  end
  redis.call('PEXPIRE', key, math.max(0, tonumber(latest) - now) + tonumber(grace))
end
`;

/** ARGV: queue, token, now, expiresAt, grace. Returns `deliver`, `duplicate` or `cancelled`. */
export const ADMIT_SCRIPT = redisScript(`${PRELUDE}
local now = tonumber(ARGV[3])
local copyField = 's|' .. ARGV[2] .. '|' .. ARGV[1]
local copy = redis.call('HGET', KEYS[1], copyField)
if copy then
  local state, deliverAt, expiresAt = split3(copy)
  if tonumber(expiresAt) > now then
    if state == 'cancelled' then return 'cancelled' end
    if state == 'pending' then
      redis.call('HSET', KEYS[1], copyField, 'taken|' .. deliverAt .. '|' .. expiresAt)
    end
  end
end
local claimField = 'c|' .. ARGV[1]
local claim = redis.call('HGET', KEYS[1], claimField)
if claim then
  local token, state, expiresAt = split3(claim)
  if tonumber(expiresAt) > now and (token ~= ARGV[2] or state == 'done') then return 'duplicate' end
end
redis.call('HSET', KEYS[1], claimField, ARGV[2] .. '|active|' .. ARGV[4], 'a|' .. ARGV[1], ARGV[3])
keep(KEYS[1], ARGV[4], now, ARGV[5])
return 'deliver'
`);

/** ARGV: queue, token, settlement, now, expiresAt, grace. Returns 1 when recorded, else 0. */
export const SETTLE_SCRIPT = redisScript(`${PRELUDE}
local now = tonumber(ARGV[4])
local claimField = 'c|' .. ARGV[1]
local claim = redis.call('HGET', KEYS[1], claimField)
if not claim then return 0 end
local token, state, expiresAt = split3(claim)
if tonumber(expiresAt) <= now or token ~= ARGV[2] or state == 'done' then return 0 end
redis.call('HSET', KEYS[1], claimField, ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[5])
redis.call('HDEL', KEYS[1], 'l|' .. ARGV[1])
keep(KEYS[1], ARGV[5], now, ARGV[6])
return 1
`);

/**
 * ARGV: queue, token, deliveryCount, excusedEnds, now, expiresAt, grace, droppedAt. Records the
 * copy's loss as of `droppedAt` unless the queue delivers another token, settled this one `done`
 * or admitted it after `droppedAt`; over a loss of the same token
 * not taken yet, keeps the ends it excused (`mergedExcusedEnds`). Returns 1 when recorded, else 0.
 */
export const LOST_SCRIPT = redisScript(`${PRELUDE}
local now = tonumber(ARGV[5])
local droppedAt = math.min(now, tonumber(ARGV[8]))
local claim = redis.call('HGET', KEYS[1], 'c|' .. ARGV[1])
if claim then
  local token, state, expiresAt = split3(claim)
  if tonumber(expiresAt) > now then
    if token ~= ARGV[2] or state == 'done' then return 0 end
    local admittedAt = tonumber(redis.call('HGET', KEYS[1], 'a|' .. ARGV[1]))
    if admittedAt and admittedAt > droppedAt then return 0 end
  end
end
local excused = tonumber(ARGV[4])
local before = redis.call('HGET', KEYS[1], 'l|' .. ARGV[1])
if before then
  local token, count, ends, _, expiresAt = string.match(before, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  if token == ARGV[2] and tonumber(expiresAt) > now then
    excused = math.max(excused, tonumber(ends) + tonumber(ARGV[3]) - tonumber(count))
  end
end
redis.call('HSET', KEYS[1], 'l|' .. ARGV[1],
  ARGV[2] .. '|' .. ARGV[3] .. '|' .. string.format('%d', excused) .. '|' .. string.format('%d', droppedAt)
  .. '|' .. ARGV[6])
keep(KEYS[1], ARGV[6], now, ARGV[7])
return 1
`);

/**
 * ARGV: queue, token, now. Returns the copy's latest loss,
 * `<deliveryCount>|<excusedEnds>|<lostAt>|<expiresAt>`, and forgets it; false when none is
 * recorded for the token, or it has expired.
 */
export const TAKE_LOSS_SCRIPT = redisScript(`${PRELUDE}
local now = tonumber(ARGV[3])
local lossField = 'l|' .. ARGV[1]
local loss = redis.call('HGET', KEYS[1], lossField)
if not loss then return false end
local bar = string.find(loss, '|', 1, true)
if string.sub(loss, 1, bar - 1) ~= ARGV[2] then return false end
local rest = string.sub(loss, bar + 1)
if tonumber(string.match(rest, '([^|]+)$')) <= now then return false end
redis.call('HDEL', KEYS[1], lossField)
return rest
`);

/** ARGV: queue, token, now, expiresAt, grace. Returns `replaced`, `held` or `in-flight`. */
export const REPLACE_SCRIPT = redisScript(`${PRELUDE}
local now = tonumber(ARGV[3])
local claimField = 'c|' .. ARGV[1]
local claim = redis.call('HGET', KEYS[1], claimField)
if claim then
  local token, state, expiresAt = split3(claim)
  if tonumber(expiresAt) > now then
    if state == 'active' then return 'in-flight' end
    if state == 'waiting' then return 'held' end
  end
end
redis.call('HSET', KEYS[1], claimField, ARGV[2] .. '|waiting|' .. ARGV[4])
redis.call('HDEL', KEYS[1], 'a|' .. ARGV[1])
keep(KEYS[1], ARGV[4], now, ARGV[5])
return 'replaced'
`);

/** ARGV: token, deliverAt, now, expiresAt, grace, then the queues. Records each copy not known yet. */
export const SCHEDULED_SCRIPT = redisScript(`${PRELUDE}
local now = tonumber(ARGV[3])
for i = 6, #ARGV do
  local field = 's|' .. ARGV[1] .. '|' .. ARGV[i]
  local known = redis.call('HGET', KEYS[1], field)
  local live = false
  if known then
    local _, _, expiresAt = split3(known)
    live = tonumber(expiresAt) > now
  end
  if not live then redis.call('HSET', KEYS[1], field, 'pending|' .. ARGV[2] .. '|' .. ARGV[4]) end
end
keep(KEYS[1], ARGV[4], now, ARGV[5])
return 1
`);

/**
 * ARGV: now. Cancels every pending copy not due yet; returns the number of queues whose copy it
 * cancelled, not counting a queue that delivers another token of the id. Drops expired fields.
 */
export const CANCEL_SCRIPT = redisScript(`${PRELUDE}
local now = tonumber(ARGV[1])
local fields = redis.call('HGETALL', KEYS[1])
local counted = {}
local count = 0
for i = 1, #fields, 2 do
  local field = fields[i]
  local kind = string.sub(field, 1, 2)
  if kind == 's|' then
    local bar = string.find(field, '|', 3, true)
    local token = string.sub(field, 3, bar - 1)
    local queue = string.sub(field, bar + 1)
    local state, deliverAt, expiresAt = split3(fields[i + 1])
    if tonumber(expiresAt) <= now then
      redis.call('HDEL', KEYS[1], field)
    elseif state == 'pending' and tonumber(deliverAt) > now then
      redis.call('HSET', KEYS[1], field, 'cancelled|' .. deliverAt .. '|' .. expiresAt)
      local other = false
      local claim = redis.call('HGET', KEYS[1], 'c|' .. queue)
      if claim then
        local claimToken, _, claimExpiresAt = split3(claim)
        other = tonumber(claimExpiresAt) > now and claimToken ~= token
      end
      if not other and not counted[queue] then
        counted[queue] = true
        count = count + 1
      end
    end
  elseif kind == 'c|' then
    local _, _, expiresAt = split3(fields[i + 1])
    if tonumber(expiresAt) <= now then redis.call('HDEL', KEYS[1], field) end
  end
end
return count
`);
