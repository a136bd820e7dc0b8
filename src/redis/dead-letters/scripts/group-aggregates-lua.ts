/**
 * Lua shared by every script that writes records: the failure-group aggregates. `K` is the keyspace
 * as Lua spells it. Per fingerprint and status (`dead`, `replayed`) two sorted sets hold the ids of
 * its records, scored by lastFailedAt (`group:<status>:last:<fp>`) and firstFailedAt
 * (`group:<status>:first:<fp>`); `groups:<dead|replayed|any>` score each fingerprint by its latest
 * lastFailedAt; `group:sample:<fp>` holds the fields shown for the group; `grouped` counts the
 * records the aggregates hold, so a reader can tell whether records written before them exist.
 */
export const GROUP_AGGREGATES_LUA = `
local function gkey(K, status, side, fp) return K .. 'group:' .. status .. ':' .. side .. ':' .. fp end
local function refreshGroup(K, fp)
  local best = nil
  for _, status in ipairs({'dead', 'replayed'}) do
    local top = redis.call('ZRANGE', gkey(K, status, 'last', fp), -1, -1, 'WITHSCORES')
    if top[2] then
      redis.call('ZADD', K .. 'groups:' .. status, top[2], fp)
      if best == nil or tonumber(top[2]) > tonumber(best) then best = top[2] end
    else
      redis.call('ZREM', K .. 'groups:' .. status, fp)
    end
  end
  if best then
    redis.call('ZADD', K .. 'groups:any', best, fp)
  else
    redis.call('ZREM', K .. 'groups:any', fp)
    redis.call('DEL', K .. 'group:sample:' .. fp)
  end
end
local function unindexGroup(K, id, fp, status)
  if not fp or not status then return end
  local removed = redis.call('ZREM', gkey(K, status, 'last', fp), id)
  redis.call('ZREM', gkey(K, status, 'first', fp), id)
  if removed == 1 then redis.call('DECR', K .. 'grouped') end
  refreshGroup(K, fp)
end
local function indexGroup(K, id, fp, status, first, last)
  if redis.call('ZADD', gkey(K, status, 'last', fp), last, id) == 1 then redis.call('INCR', K .. 'grouped') end
  redis.call('ZADD', gkey(K, status, 'first', fp), first, id)
  refreshGroup(K, fp)
end
local function deleteRecord(K, key, id)
  local old = redis.call('HMGET', key, 'fp', 'status')
  local n = redis.call('DEL', key)
  if n == 1 then unindexGroup(K, id, old[1], old[2]) end
  return n
end
`;
