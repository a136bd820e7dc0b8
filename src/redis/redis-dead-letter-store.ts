import type { Cluster, Redis } from 'ioredis';
import {
  MAX_REPLAY_HISTORY,
  type DeadLetterFilter,
  type DeadLetterGroupPage,
  type DeadLetterGroupPageOptions,
  type DeadLetterPage,
  type DeadLetterPageOptions,
  type DeadLetterRecord,
  type DeadLetterStore,
  type ReplayRecord,
} from '../dead-letters/dead-letter-store.js';
import { decodeGroupCursor, groupPageLimit } from '../dead-letters/dead-letter-groups.js';
import {
  matchesDeadLetterFilter,
  selectsEveryDeadLetter,
} from '../dead-letters/matches-dead-letter-filter.js';
import { HarrierError } from '../errors/harrier-error.js';
import {
  connectionFor,
  evalScript,
  keyPrefixOf,
  redisScript,
  runCommand,
  type RedisConnection,
  type RedisErrorContext,
  type RedisScript,
} from './redis-support.js';
import type { RedisConnectionOptions } from './redis-connection.js';
import { decodeChunkEntries, type ChunkEntry } from './dead-letters/chunk-entries.js';
import { DeadLetterKeys } from './dead-letters/dead-letter-keys.js';
import { decodeFilterChunk, isSelected, type FilterChunk } from './dead-letters/filter-chunk.js';
import { aggregatedStatuses, decodeGroupsPage, encodeGroupSample } from './dead-letters/group-aggregates.js';
import { GroupSums, groupWithSample, type SampleRef } from './dead-letters/group-sums.js';
import { decodeListCursor, encodeListCursor } from './dead-letters/list-cursor.js';
import {
  decodeRecord,
  encodeRecordData,
  encodeReplay,
  encodeReplays,
  RECORD_FIELDS,
} from './dead-letters/record-codec.js';

/** Options of {@link RedisDeadLetterStore}. */
export interface RedisDeadLetterStoreOptions {
  /**
   * Where Redis is (see {@link RedisConnectionOptions}): a `redis://` (or `rediss://`) URL, an
   * ioredis client to share (a `Redis`, or a `Cluster` for Redis Cluster), `{ cluster: nodes }`, or
   * ioredis options. Every key carries the prefix's hash tag, so on a cluster all share one slot.
   *
   * @remarks
   * The store creates, and on {@link RedisDeadLetterStore.close} quits, a client for a URL (or seed nodes, or options). A client
   * passed in stays the caller's: the store never quits it, never adds listeners to it, and its own
   * retry settings apply instead of `maxRetriesPerRequest` and `connectTimeoutMs` below.
   *
   * @defaultValue none; required
   */
  readonly connection: RedisConnectionOptions;
  /**
   * Prefix of every key the store writes; its keys are `<prefix>:dlq:...`.
   *
   * @remarks
   * The braces make it a Redis Cluster hash tag, so every key of the store lands in one slot and its
   * Lua scripts, which reach records by id, stay valid behind a cluster-aware proxy. Stores sharing a
   * prefix share their dead letters.
   *
   * @defaultValue '\{harrier\}'
   */
  readonly prefix?: string;
  /**
   * Most records kept; when a new record would exceed it, the oldest by first insertion is dropped.
   * @defaultValue 100000
   */
  readonly maxRecords?: number;
  /**
   * For a client the store creates: how many reconnect attempts a command waits through before it
   * fails with `redis-unavailable`; `null` waits for as long as Redis is down.
   *
   * @remarks
   * One keeps the `harrier dlq` CLI quick to report a Redis that is down (well under a second for a
   * refused connection), while a long-running worker rides out a brief blip: its client keeps
   * reconnecting in the background whatever this says, so the first command after Redis is back
   * succeeds, and a dead-lettering that failed meanwhile is retried by the broker. The offline queue
   * stays on, because without it every command sent before the first connect completes would fail.
   *
   * @defaultValue 1
   */
  readonly maxRetriesPerRequest?: number | null;
  /**
   * For a client the store creates: how long one connection attempt may take before it counts as
   * failed, in ms.
   *
   * @remarks
   * Bounds how long a command waits when Redis's host drops packets instead of refusing them: at most
   * about `(maxRetriesPerRequest + 1) * connectTimeoutMs`. A healthy Redis connects in milliseconds.
   *
   * @defaultValue 3000
   */
  readonly connectTimeoutMs?: number;
}

const DEFAULT_MAX_RECORDS = 100_000;
const DEFAULT_PAGE_LIMIT = 100;
/**
 * Index entries read per round trip while purging; also the most records a filter scan returns at
 * once, so that records written before the filter fields travel in replies of bounded size.
 */
const SCAN_CHUNK = 200;
/**
 * Index entries one filter scan script reads (see FILTER_SCAN_SCRIPT): enough that a count over
 * 100,000 records takes 13 round trips (on a busy host each costs tens of ms of scheduling). With
 * FILTER_CHUNK_BYTES this bounds how much one script reads, and so how long it blocks Redis: about
 * 40 ms on 2 shared cores for 8,000 small records (bench:dashboard).
 */
const FILTER_CHUNK = 8000;
/** The same for a text search, which lower-cases and may decode each record's JSON. */
const TEXT_FILTER_CHUNK = 1000;
/**
 * Bytes of record text one filter scan script reads (a text search's `data`) or returns (records it
 * sends back whole) before it stops and returns its cursor. A text search costs time per byte, not
 * per record, and an envelope may be a MiB: without this, 1,000 such records would block Redis for
 * seconds and a reply would be hundreds of MB. The script stops after the record that crosses it, so
 * one script reads at most this plus one record (about 20 ms a MiB of text on 2 shared cores).
 */
const FILTER_CHUNK_BYTES = 2 * 1024 * 1024;
/** Most records one page of a text search reads before it returns what it found and a cursor. */
const TEXT_SCAN_BUDGET = 10_000;
/** Ids per atomic batch in `remove`, so one script never blocks Redis for long. */
const REMOVE_BATCH = 500;

/**
 * Lua shared by every script that writes records: the failure-group aggregates. `K` is the keyspace
 * as Lua spells it. Per fingerprint and status (`dead`, `replayed`) two sorted sets hold the ids of
 * its records, scored by lastFailedAt (`group:<status>:last:<fp>`) and firstFailedAt
 * (`group:<status>:first:<fp>`); `groups:<dead|replayed|any>` score each fingerprint by its latest
 * lastFailedAt; `group:sample:<fp>` holds the fields shown for the group; `grouped` counts the
 * records the aggregates hold, so a reader can tell whether records written before them exist.
 */
const GROUP_LUA = `
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

/**
 * Lua of the add script: the fields the filter scan reads instead of decoding `data`. `x` marks a
 * record that has them (records written by a Harrier from before them have none, and the scan leaves
 * those to Node); `x:ep` and `x:rs` hold endpoint and reason, `x:type` and `x:hd` type and handler,
 * absent when undefined. Arguments from `first` on: endpoint, type, handler, reason, each '' when
 * undefined and '=' then the value otherwise, so an empty string stays apart from undefined.
 */
const FILTER_FIELDS_LUA = `
local function setFilterFields(key, first)
  local names = {'x:ep', 'x:type', 'x:hd', 'x:rs'}
  redis.call('HSET', key, 'x', '1')
  for i, name in ipairs(names) do
    local arg = ARGV[first + i - 1]
    if arg == '' then redis.call('HDEL', key, name) else redis.call('HSET', key, name, string.sub(arg, 2)) end
  end
end
`;

/**
 * KEYS: record, index, sequence. ARGV: id, data, firstFailedAt, status, replays, maxRecords,
 * record key prefix, fingerprint, lastFailedAt, group sample JSON, keyspace, then the filter fields
 * endpoint, type, handler and reason (see FILTER_FIELDS_LUA). Returns the stored firstFailedAt,
 * status and replays.
 */
const ADD_SCRIPT = `${GROUP_LUA}${FILTER_FIELDS_LUA}
local K = ARGV[11]
if redis.call('EXISTS', KEYS[1]) == 1 then
  local old = redis.call('HMGET', KEYS[1], 'fp', 'status', 'first')
  unindexGroup(K, ARGV[1], old[1], old[2])
  redis.call('HSET', KEYS[1], 'data', ARGV[2], 'status', 'dead', 'fp', ARGV[8], 'last', ARGV[9])
  redis.call('HINCRBY', KEYS[1], 'v', 1)
  indexGroup(K, ARGV[1], ARGV[8], 'dead', old[3], ARGV[9])
  redis.call('SET', K .. 'group:sample:' .. ARGV[8], ARGV[10])
  setFilterFields(KEYS[1], 12)
  return redis.call('HMGET', KEYS[1], 'first', 'status', 'replays')
end
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], 'data', ARGV[2], 'first', ARGV[3], 'status', ARGV[4], 'replays', ARGV[5], 'v', 1, 'fp', ARGV[8], 'last', ARGV[9])
redis.call('ZADD', KEYS[2], seq, ARGV[1])
setFilterFields(KEYS[1], 12)
indexGroup(K, ARGV[1], ARGV[8], ARGV[4], ARGV[3], ARGV[9])
redis.call('SET', K .. 'group:sample:' .. ARGV[8], ARGV[10])
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[6])
if excess > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[2], 0, excess - 1)) do
    deleteRecord(K, ARGV[7] .. old, old)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, excess - 1)
end
return {ARGV[3], ARGV[4], ARGV[5]}
`;

/**
 * KEYS: record. ARGV: replay entry JSON, most entries kept, id, keyspace. Returns 1, or 0 when there
 * is no record.
 */
const MARK_REPLAYED_SCRIPT = `${GROUP_LUA}
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local entries = {}
for entry in string.gmatch(redis.call('HGET', KEYS[1], 'replays') or '', '[^\\n]+') do
  entries[#entries + 1] = entry
end
entries[#entries + 1] = ARGV[1]
local from = math.max(1, #entries - tonumber(ARGV[2]) + 1)
local old = redis.call('HMGET', KEYS[1], 'fp', 'status', 'first', 'last')
redis.call('HSET', KEYS[1], 'status', 'replayed', 'replays', table.concat(entries, '\\n', from))
redis.call('HINCRBY', KEYS[1], 'v', 1)
if old[1] and old[2] ~= 'replayed' then
  unindexGroup(ARGV[4], ARGV[3], old[1], old[2])
  indexGroup(ARGV[4], ARGV[3], old[1], 'replayed', old[3], old[4])
end
return 1
`;

/**
 * KEYS: index. ARGV: min score (ZRANGEBYSCORE syntax), count, record key prefix. Returns, per index
 * entry in order: id, score, then the record's fields (nil when the record is missing).
 */
const READ_CHUNK_SCRIPT = `
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for i = 1, #entries, 2 do
  out[#out + 1] = entries[i]
  out[#out + 1] = entries[i + 1]
  local fields = redis.call('HMGET', ARGV[3] .. entries[i], ${RECORD_FIELDS.map((f) => `'${f}'`).join(', ')})
  for j = 1, ${RECORD_FIELDS.length} do out[#out + 1] = fields[j] end
end
return out
`;

/**
 * Reads up to a number of index entries in order and applies a filter to each record inside Redis,
 * from its filter fields (see FILTER_FIELDS_LUA) and, for a text search, its `data`, so that only
 * what the caller needs travels: in `list` mode the selected records, in `count` mode their number,
 * in `groups` mode their number, first and last failure and latest record per fingerprint. A record
 * the script cannot judge (one without filter fields, or a text that Lua cannot compare as
 * JavaScript does) is returned whole as a candidate, for the caller to apply the filter itself.
 *
 * KEYS: index. ARGV: record key prefix, min score (ZRANGEBYSCORE syntax), most entries to read,
 * mode (`list`, `count`, `groups`), most records to return (it stops reading there), status (`dead`,
 * `replayed`, `any`), then endpoint, type, handler, reason and fingerprint (each '' when unset, else
 * '=' and the value), since and until ('' when unset), text mode ('' for none, `lua`, or `node` for a
 * needle with other than printable ASCII), the needle lower-cased, the needle as JSON escapes it
 * once and twice, and the most bytes of record text to read or return (it stops after the record
 * that reaches it, see FILTER_CHUNK_BYTES). Returns {entries read, score of the last one read, whether the index ended,
 * records selected and not returned, records (per record: id, score, 1 when selected or 2 for a
 * candidate, then RECORD_FIELDS), groups (per fingerprint: fingerprint, count, first failure, last
 * failure, latest score, latest id)}.
 */
const FILTER_SCAN_SCRIPT = `
local function want(arg) if arg == '' then return nil end return string.sub(arg, 2) end
local prefix, mode, most = ARGV[1], ARGV[4], tonumber(ARGV[5])
local status = ARGV[6]
local endpoint, mtype, handler, reason, fp = want(ARGV[7]), want(ARGV[8]), want(ARGV[9]), want(ARGV[10]), want(ARGV[11])
local since, before = tonumber(ARGV[12]), tonumber(ARGV[13])
local textMode, needle, once, twice = ARGV[14], ARGV[15], ARGV[16], ARGV[17]
local byteBudget, bytes = tonumber(ARGV[18]), 0
-- JavaScript lower-cases KELVIN SIGN to k and CAPITAL I WITH DOT ABOVE to i and a dot; Lua leaves them.
local function oddCase(text) return string.find(text, '\\226\\132\\170', 1, true) or string.find(text, '\\196\\176', 1, true) end
local function holds(text)
  return type(text) == 'string' and string.find(string.lower(text), needle, 1, true) ~= nil
end
-- 0: no match, 1: match, 2: Node must decide.
local function textVerdict(data)
  if not data then return 0 end
  bytes = bytes + #data
  local odd = oddCase(data)
  if not odd then
    local lowered = string.lower(data)
    if not (string.find(lowered, once, 1, true) or string.find(lowered, twice, 1, true)) then return 0 end
  end
  local ok, record = pcall(cjson.decode, data)
  if odd or not ok or type(record) ~= 'table' or type(record.error) ~= 'table' then return 2 end
  if holds(record.error.message) or holds(record.error.stack) or holds(record.envelope) then return 1 end
  return 0
end
-- Only the fields the filter and mode read: each one more costs every record of the walk.
local names, slot = {'x', 'status'}, {}
local function need(name) names[#names + 1] = name; slot[name] = #names end
if fp or mode == 'groups' then need('fp') end
if since or before or mode == 'groups' then need('last') end
if endpoint then need('x:ep') end
if mtype then need('x:type') end
if handler then need('x:hd') end
if reason then need('x:rs') end
if mode == 'groups' then need('first') end
local budget = tonumber(ARGV[3])
local from = ARGV[2]
local out, groups, byFp = {}, {}, {}
local read, last, returned, selected, ended, full = 0, false, 0, 0, 0, false
-- Index entries in batches, so a run that stops early has not fetched the rest of its budget.
while not full and read < budget do
  local size = math.min(200, budget - read)
  local entries = redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf', 'WITHSCORES', 'LIMIT', 0, size)
  for i = 1, #entries, 2 do
    local id, score = entries[i], entries[i + 1]
    read = read + 1
    last = score
    local key = prefix .. id
    local f = redis.call('HMGET', key, unpack(names))
    local verdict = 0
    if not f[1] then
      if f[2] then verdict = 2 end
    elseif (status == 'any' or f[2] == status)
      and (not fp or f[slot['fp']] == fp)
      and (not endpoint or f[slot['x:ep']] == endpoint)
      and (not mtype or f[slot['x:type']] == mtype)
      and (not handler or f[slot['x:hd']] == handler)
      and (not reason or f[slot['x:rs']] == reason)
      and (not since or tonumber(f[slot['last']]) >= since)
      and (not before or tonumber(f[slot['last']]) < before) then
      verdict = 1
      if textMode == 'node' then verdict = 2
      elseif textMode == 'lua' then verdict = textVerdict(redis.call('HGET', key, 'data')) end
    end
    if verdict == 2 or (verdict == 1 and mode == 'list') then
      local fields = redis.call('HMGET', key, ${RECORD_FIELDS.map((f) => `'${f}'`).join(', ')})
      out[#out + 1] = id
      out[#out + 1] = score
      out[#out + 1] = verdict
      for j = 1, ${RECORD_FIELDS.length} do
        out[#out + 1] = fields[j]
        if fields[j] then bytes = bytes + #fields[j] end
      end
      returned = returned + 1
    elseif verdict == 1 then
      selected = selected + 1
      if mode == 'groups' then
        local group = f[slot['fp']]
        local first, lastFailed, seq = tonumber(f[slot['first']]), tonumber(f[slot['last']]), tonumber(score)
        local g = byFp[group]
        if not g then
          g = {group, 0, first, lastFailed, seq, id}
          byFp[group] = g
          groups[#groups + 1] = g
        end
        g[2] = g[2] + 1
        if first < g[3] then g[3] = first end
        if lastFailed > g[4] then g[4] = lastFailed end
        if seq >= g[5] then g[5] = seq; g[6] = id end
      end
    end
    -- Stopping here, not when the index ends, leaves ended 0: the caller resumes from last.
    if returned >= most or bytes >= byteBudget then
      full = true
      break
    end
  end
  if not full and #entries / 2 < size then
    ended = 1
    break
  end
  if last then from = '(' .. last end
end
local flat = {}
for _, g in ipairs(groups) do
  for j = 1, 6 do flat[#flat + 1] = g[j] end
end
return {read, last, ended, selected, out, flat}
`;

/**
 * KEYS: index, then one record key per id. ARGV: keyspace, then the ids. Returns how many records
 * existed.
 */
const REMOVE_SCRIPT = `${GROUP_LUA}
local n = 0
for i = 2, #KEYS do
  n = n + deleteRecord(ARGV[1], KEYS[i], ARGV[i])
  redis.call('ZREM', KEYS[1], ARGV[i])
end
return n
`;

/**
 * KEYS: index, then one record key per id. ARGV: keyspace, then id and version pairs. Deletes each
 * record still at the version that was read; returns how many it deleted.
 */
const PURGE_SCRIPT = `${GROUP_LUA}
local n = 0
for i = 2, #KEYS do
  local id = ARGV[2 * i - 2]
  if redis.call('HGET', KEYS[i], 'v') == ARGV[2 * i - 1] then
    deleteRecord(ARGV[1], KEYS[i], id)
    redis.call('ZREM', KEYS[1], id)
    n = n + 1
  end
end
return n
`;

/**
 * KEYS: index, groups index of the state asked for. ARGV: keyspace, statuses to sum (space
 * separated), max score ('+inf' or the cursor's lastSeen), cursor fingerprint ('' for none), limit,
 * fingerprint filter ('' for none). Returns {ready, then per group: fp, count, firstSeen, lastSeen,
 * sample JSON}, at most limit + 1 groups; ready is 0 when records without aggregates exist.
 */
const GROUPS_SCRIPT = `
local K = ARGV[1]
if tonumber(redis.call('GET', K .. 'grouped') or '0') ~= redis.call('ZCARD', KEYS[1]) then return {0} end
local statuses = {}
for status in string.gmatch(ARGV[2], '%S+') do statuses[#statuses + 1] = status end
local limit = tonumber(ARGV[5])
local out = {1}
local found = 0
local function emit(fp, score)
  local count, first = 0, nil
  for _, status in ipairs(statuses) do
    count = count + redis.call('ZCARD', K .. 'group:' .. status .. ':last:' .. fp)
    local low = redis.call('ZRANGE', K .. 'group:' .. status .. ':first:' .. fp, 0, 0, 'WITHSCORES')
    if low[2] and (first == nil or tonumber(low[2]) < tonumber(first)) then first = low[2] end
  end
  out[#out + 1] = fp
  out[#out + 1] = count
  out[#out + 1] = first or score
  out[#out + 1] = score
  out[#out + 1] = redis.call('GET', K .. 'group:sample:' .. fp) or '{}'
  found = found + 1
end
-- Whether a group sorts after the cursor (newest lastSeen first, then by fingerprint).
local function afterCursor(fp, score)
  if ARGV[3] == '+inf' then return true end
  local s, max = tonumber(score), tonumber(ARGV[3])
  if s ~= max then return s < max end
  return ARGV[4] == '' or fp < ARGV[4]
end
if ARGV[6] ~= '' then
  -- One fingerprint is one member: a lookup, where walking the set would cost every group.
  local score = redis.call('ZSCORE', KEYS[2], ARGV[6])
  if score and afterCursor(ARGV[6], score) then emit(ARGV[6], score) end
  return out
end
local offset = 0
while found <= limit do
  local chunk = redis.call('ZREVRANGEBYSCORE', KEYS[2], ARGV[3], '-inf', 'WITHSCORES', 'LIMIT', offset, 200)
  if #chunk == 0 then break end
  offset = offset + #chunk / 2
  for i = 1, #chunk, 2 do
    local fp, score = chunk[i], chunk[i + 1]
    local skip = ARGV[4] ~= '' and tonumber(score) == tonumber(ARGV[3]) and fp >= ARGV[4]
    if not skip and found <= limit then emit(fp, score) end
  end
end
return out
`;

/**
 * KEYS: index. ARGV: keyspace, statuses to sum (space separated), fingerprint ('' for all), then the
 * lowest and highest lastFailedAt (ZCOUNT syntax; the group sets are scored by it). Returns the
 * number of records, or -1 when records without aggregates exist.
 */
const COUNT_SCRIPT = `
local K = ARGV[1]
if tonumber(redis.call('GET', K .. 'grouped') or '0') ~= redis.call('ZCARD', KEYS[1]) then return -1 end
local n = 0
for status in string.gmatch(ARGV[2], '%S+') do
  if ARGV[3] ~= '' then
    n = n + redis.call('ZCOUNT', K .. 'group:' .. status .. ':last:' .. ARGV[3], ARGV[4], ARGV[5])
  else
    for _, fp in ipairs(redis.call('ZRANGE', K .. 'groups:' .. status, 0, -1)) do
      n = n + redis.call('ZCOUNT', K .. 'group:' .. status .. ':last:' .. fp, ARGV[4], ARGV[5])
    end
  end
end
return n
`;

/**
 * KEYS: record. ARGV: handledAt. Sets `handledAt` on the latest replay entry of a `replayed` record,
 * spliced into its JSON as text (no Lua JSON library, which would round numbers); keeps one already
 * set. Returns 1 when the latest replay is marked, 0 when there is no record, it is `dead` again,
 * or it has no replay.
 */
const MARK_REPLAY_HANDLED_SCRIPT = `
local state = redis.call('HMGET', KEYS[1], 'status', 'replays')
if state[1] ~= 'replayed' or not state[2] or state[2] == '' then return 0 end
local head, last = '', state[2]
local cut = string.find(last, '\\n[^\\n]*$')
if cut then
  head = string.sub(last, 1, cut)
  last = string.sub(last, cut + 1)
end
if string.find(last, '"handledAt":', 1, true) then return 1 end
if string.sub(last, -1) ~= '}' then return 0 end
redis.call('HSET', KEYS[1], 'replays', head .. string.sub(last, 1, -2) .. ',"handledAt":' .. ARGV[1] .. '}')
redis.call('HINCRBY', KEYS[1], 'v', 1)
return 1
`;

const SCRIPTS = {
  add: redisScript(ADD_SCRIPT),
  markReplayed: redisScript(MARK_REPLAYED_SCRIPT),
  markReplayHandled: redisScript(MARK_REPLAY_HANDLED_SCRIPT),
  readChunk: redisScript(READ_CHUNK_SCRIPT),
  filterScan: redisScript(FILTER_SCAN_SCRIPT),
  remove: redisScript(REMOVE_SCRIPT),
  purge: redisScript(PURGE_SCRIPT),
  groups: redisScript(GROUPS_SCRIPT),
  count: redisScript(COUNT_SCRIPT),
} as const;

/** A filter value as the scripts take it: '' when undefined, else '=' and the value. */
function optionalArg(value: string | number | undefined): string {
  return value === undefined ? '' : `=${value}`;
}

/** The add script's filter field arguments (see FILTER_FIELDS_LUA). */
function filterFieldArgs(record: DeadLetterRecord): string[] {
  return [record.endpoint, record.type, record.handler, record.reason].map(optionalArg);
}

/**
 * Keeps dead letters in Redis, so they outlive restarts and every process of an application sees the
 * same ones.
 *
 * @remarks
 * Each record is a hash under `<prefix>:dlq:record:<id>`; a sorted set `<prefix>:dlq:index` scores
 * each id by an insertion sequence (`<prefix>:dlq:seq`), so lists come in first-insertion order and
 * an update keeps its place. Every write is one Lua script, so concurrent stores on the same prefix
 * never leave two records for one id or a record without its index entry. Lists, counts and groups
 * walk the index in chunks and apply the filter inside Redis, to fields each record keeps beside its
 * JSON (endpoint, type, handler, reason, status, fingerprint, last failure), so only what was asked
 * for travels; their cost still grows with the records held, not with the records matched, and
 * `maxRecords` bounds it. Purges walk and filter here.
 *
 * Failures reject with a {@link HarrierError}: `redis-unavailable` when Redis cannot be reached,
 * `redis-command-failed` when it refuses a command, `store-closed` after {@link close},
 * `invalid-cursor` and `invalid-argument` for bad paging.
 *
 * @example
 * ```ts
 * const store = new RedisDeadLetterStore({ connection: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' });
 * const { records, next } = await store.list({ endpoint: 'billing' }, { limit: 50 });
 * await store.close();
 * ```
 */
export class RedisDeadLetterStore implements DeadLetterStore {
  readonly #connection: RedisConnection;
  readonly #client: Redis | Cluster;
  readonly #errors: RedisErrorContext;
  readonly #maxRecords: number;
  readonly #keys: DeadLetterKeys;
  #closed = false;

  /** @throws HarrierError `invalid-option` when `prefix` is empty or `maxRecords` is not a positive integer. */
  constructor(options: RedisDeadLetterStoreOptions) {
    const prefix = keyPrefixOf(options.prefix, 'RedisDeadLetterStore');
    const maxRecords = options.maxRecords ?? DEFAULT_MAX_RECORDS;
    if (!Number.isInteger(maxRecords) || maxRecords < 1) {
      throw new HarrierError(
        'invalid-option',
        `RedisDeadLetterStore maxRecords must be a positive integer, got ${maxRecords}: pass a whole number such as 100000, or leave it out for the default`,
      );
    }
    this.#maxRecords = maxRecords;

    this.#connection = connectionFor(options.connection, options);
    this.#client = this.#connection.client;
    this.#keys = new DeadLetterKeys(prefix, this.#client.options.keyPrefix ?? '');
    this.#errors = {
      connection: this.#connection,
      command: 'a dead-letter store command',
      keyspace: this.#keys.keyspace,
    };
  }

  add(record: DeadLetterRecord): Promise<DeadLetterRecord> {
    return this.#run(async () => {
      const key = this.#keys.record(record.id);
      const data = encodeRecordData(record);
      const reply = await this.#eval(
        SCRIPTS.add,
        [key, this.#keys.index, this.#keys.seq],
        [
          record.id,
          data,
          String(record.firstFailedAt),
          record.status,
          encodeReplays(record.replays),
          String(this.#maxRecords),
          this.#keys.scriptRecordPrefix,
          record.fingerprint,
          String(record.lastFailedAt),
          encodeGroupSample(record),
          this.#keys.scriptKeyspace,
          ...filterFieldArgs(record),
        ],
      );
      const [first, status, replays] = reply as [string, string, string];
      // Decoded from what was written, so the caller gets exactly what a later get() returns.
      return decodeRecord(key, data, first, status, replays);
    });
  }

  get(id: string): Promise<DeadLetterRecord | undefined> {
    return this.#run(async () => {
      const key = this.#keys.record(id);
      const [data, first, status, replays] = await this.#client.hmget(
        key,
        'data',
        'first',
        'status',
        'replays',
      );
      if (data == null) return undefined;
      return decodeRecord(key, data, first ?? '0', status ?? 'dead', replays ?? '');
    });
  }

  /** @throws HarrierError `invalid-cursor` for a cursor this store did not issue, `invalid-argument` for a bad limit. */
  list(filter: DeadLetterFilter = {}, page: DeadLetterPageOptions = {}): Promise<DeadLetterPage> {
    return this.#run(async () => {
      const limit = page.limit ?? DEFAULT_PAGE_LIMIT;
      if (!Number.isInteger(limit) || limit < 1) {
        throw new HarrierError(
          'invalid-argument',
          `Dead-letter page limit must be a positive integer, got ${limit}: pass a whole number such as 100, or leave it out for the default`,
        );
      }
      const records: DeadLetterRecord[] = [];
      let from = page.cursor === undefined ? undefined : decodeListCursor(page.cursor);
      let lastSeq = 0;
      let read = 0;
      for (;;) {
        // One match past the page says whether there is a next page, so a page that ends exactly at
        // the last match reports none.
        const chunk = await this.#filterChunk(filter, 'list', from, limit + 1 - records.length);
        for (const entry of chunk.entries) {
          if (!isSelected(entry, filter)) continue;
          if (records.length === limit) return { records, next: encodeListCursor(lastSeq) };
          records.push(entry.record);
          lastSeq = entry.seq;
        }
        if (chunk.ended || chunk.last === undefined) return { records, next: undefined };
        from = chunk.last;
        read += chunk.read;
        // A text search reads a bounded number of records per page, so a rare text still answers
        // quickly: the page then ends where the reading stopped, however few it holds.
        if (filter.text !== undefined && read >= TEXT_SCAN_BUDGET)
          return { records, next: encodeListCursor(from) };
      }
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.count}
   *
   * @remarks
   * A filter of status, fingerprint and time window alone is answered from the failure-group
   * aggregates; any other field is applied inside Redis, chunk by chunk, to fields each record keeps beside its JSON
   * (a text search decodes the JSON there), so only the number travels.
   */
  count(filter: DeadLetterFilter = {}): Promise<number> {
    return this.#run(async () => {
      if (selectsEveryDeadLetter(filter)) return await this.#client.zcard(this.#keys.index);
      // The group sets are scored by lastFailedAt, so a time window is a range of them.
      const { since: _since, until: _until, ...untimed } = filter;
      const statuses = aggregatedStatuses(untimed);
      if (statuses !== undefined) {
        const n = Number(
          await this.#eval(
            SCRIPTS.count,
            [this.#keys.index],
            [
              this.#keys.scriptKeyspace,
              statuses,
              filter.fingerprint ?? '',
              filter.since === undefined ? '-inf' : String(filter.since),
              filter.until === undefined ? '+inf' : `(${filter.until}`,
            ],
          ),
        );
        if (n >= 0) return n;
      }
      let n = 0;
      for await (const chunk of this.#filterChunks(filter, 'count')) {
        n += chunk.selected + chunk.entries.filter((entry) => isSelected(entry, filter)).length;
      }
      return n;
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.groups}
   *
   * @remarks
   * Every write keeps per-fingerprint aggregates in the same script as the record, so a filter of
   * status and fingerprint alone is answered from them in time that grows with the groups on the
   * page, not with the records held. Any other field (endpoint, time window, text, ...) is applied
   * inside Redis chunk by chunk, as in `count`, which returns per-fingerprint sums; records written
   * by a Harrier from before the aggregates or the filter fields are read and filtered here.
   */
  groups(filter: DeadLetterFilter = {}, page: DeadLetterGroupPageOptions = {}): Promise<DeadLetterGroupPage> {
    return this.#run(async () => {
      const limit = groupPageLimit(page);
      const after = page.cursor === undefined ? undefined : decodeGroupCursor(page.cursor);
      const statuses = aggregatedStatuses(filter);
      if (statuses !== undefined) {
        const state = filter.status ?? 'dead';
        const reply = (await this.#eval(
          SCRIPTS.groups,
          [this.#keys.index, this.#keys.groups(state)],
          [
            this.#keys.scriptKeyspace,
            statuses,
            after === undefined ? '+inf' : String(after.lastSeen),
            after?.fingerprint ?? '',
            String(limit),
            filter.fingerprint ?? '',
          ],
        )) as unknown[];
        if (reply[0] === 1) return decodeGroupsPage(reply.slice(1), limit);
      }
      const sums = new GroupSums();
      for await (const chunk of this.#filterChunks(filter, 'groups')) {
        for (const sum of chunk.groups) sums.add(sum);
        for (const entry of chunk.entries) {
          if (isSelected(entry, filter)) sums.addRecord(entry.record, entry.seq);
        }
      }
      const { groups, next } = sums.page(after, limit);
      const samples = await this.#samples(groups.map((group) => group.sample));
      return { groups: groups.map((group, i) => groupWithSample(group, samples[i])), next };
    });
  }

  markReplayed(id: string, replay: ReplayRecord): Promise<boolean> {
    return this.#run(async () => {
      const reply = await this.#eval(
        SCRIPTS.markReplayed,
        [this.#keys.record(id)],
        [encodeReplay(replay), String(MAX_REPLAY_HISTORY), id, this.#keys.scriptKeyspace],
      );
      return reply === 1;
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.markReplayHandled}
   *
   * @remarks
   * One script, so it never marks a record that died again meanwhile.
   */
  markReplayHandled(id: string, at: number): Promise<boolean> {
    return this.#run(async () => {
      const reply = await this.#eval(SCRIPTS.markReplayHandled, [this.#keys.record(id)], [String(at)]);
      return reply === 1;
    });
  }

  remove(ids: readonly string[]): Promise<number> {
    return this.#run(async () => {
      // An id given twice is counted once, as the in-memory store does.
      const unique = [...new Set(ids)];
      let n = 0;
      for (let i = 0; i < unique.length; i += REMOVE_BATCH) {
        const batch = unique.slice(i, i + REMOVE_BATCH);
        const keys = [this.#keys.index, ...batch.map((id) => this.#keys.record(id))];
        n += Number(await this.#eval(SCRIPTS.remove, keys, [this.#keys.scriptKeyspace, ...batch]));
      }
      return n;
    });
  }

  /**
   * {@inheritDoc DeadLetterStore.purge}
   *
   * @remarks
   * Deletes chunk by chunk, each chunk atomically. A record changed by another process between being
   * read and being deleted is kept, so a purge never deletes a record that no longer matches.
   */
  purge(filter: DeadLetterFilter = {}): Promise<number> {
    return this.#run(async () => {
      let n = 0;
      let after: number | undefined;
      for (;;) {
        const chunk = await this.#readChunk(after);
        const doomed = chunk.filter(
          (entry): entry is ChunkEntry & { record: DeadLetterRecord; version: string } =>
            entry.record !== undefined &&
            entry.version !== undefined &&
            matchesDeadLetterFilter(entry.record, filter),
        );
        if (doomed.length > 0) {
          const keys = [this.#keys.index, ...doomed.map((entry) => this.#keys.record(entry.id))];
          const args = [this.#keys.scriptKeyspace, ...doomed.flatMap((entry) => [entry.id, entry.version])];
          n += Number(await this.#eval(SCRIPTS.purge, keys, args));
        }
        const last = chunk.at(-1);
        if (last === undefined || chunk.length < SCAN_CHUNK) return n;
        after = last.seq;
      }
    });
  }

  /**
   * Quits the client the store created from a URL; a client passed in is left open. Records stay in
   * Redis. Later calls reject with `store-closed`; closing twice is harmless.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#connection.close();
  }

  /** Every chunk of a filter scan from the start of the index to its end. */
  async *#filterChunks(filter: DeadLetterFilter, mode: 'count' | 'groups'): AsyncGenerator<FilterChunk> {
    let from: number | undefined;
    for (;;) {
      const chunk = await this.#filterChunk(filter, mode, from, SCAN_CHUNK);
      yield chunk;
      if (chunk.ended || chunk.last === undefined) return;
      from = chunk.last;
    }
  }

  /** One run of the filter scan script (see FILTER_SCAN_SCRIPT) after sequence `after`. */
  async #filterChunk(
    filter: DeadLetterFilter,
    mode: 'list' | 'count' | 'groups',
    after: number | undefined,
    most: number,
  ): Promise<FilterChunk> {
    const text = filter.text;
    // Lua's lower() knows only ASCII, so only an ASCII needle can be compared in Redis.
    const textMode = text === undefined ? '' : /^[\x20-\x7e]*$/.test(text) ? 'lua' : 'node';
    const needle = text?.toLowerCase() ?? '';
    const once = JSON.stringify(needle).slice(1, -1);
    const size = textMode === '' ? FILTER_CHUNK : TEXT_FILTER_CHUNK;
    const reply = await this.#eval(
      SCRIPTS.filterScan,
      [this.#keys.index],
      [
        this.#keys.scriptRecordPrefix,
        after === undefined ? '-inf' : `(${after}`,
        String(size),
        mode,
        String(most),
        filter.status ?? 'dead',
        ...[filter.endpoint, filter.type, filter.handler, filter.reason, filter.fingerprint].map(optionalArg),
        filter.since === undefined ? '' : String(filter.since),
        filter.until === undefined ? '' : String(filter.until),
        textMode,
        needle,
        once,
        JSON.stringify(once).slice(1, -1),
        String(FILTER_CHUNK_BYTES),
      ],
    );
    return decodeFilterChunk(reply, this.#keys);
  }

  /** The sample record of each group: the one it holds already, else read now (undefined if gone). */
  async #samples(samples: readonly SampleRef[]): Promise<(DeadLetterRecord | undefined)[]> {
    return Promise.all(samples.map(async (sample) => sample.record ?? (await this.get(sample.id))));
  }

  async #readChunk(after: number | undefined): Promise<ChunkEntry[]> {
    const reply = (await this.#eval(
      SCRIPTS.readChunk,
      [this.#keys.index],
      [after === undefined ? '-inf' : `(${after}`, String(SCAN_CHUNK), this.#keys.scriptRecordPrefix],
    )) as unknown[];
    return decodeChunkEntries(reply, this.#keys);
  }

  #eval(script: RedisScript, keys: readonly string[], args: readonly string[]): Promise<unknown> {
    return evalScript(this.#client, script, keys, args);
  }

  /** Runs `body` on an open store and turns Redis's failures into {@link HarrierError}s. */
  async #run<T>(body: () => Promise<T>): Promise<T> {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        'The Redis dead-letter store is closed: create a new RedisDeadLetterStore to use dead letters again',
      );
    }
    return runCommand(body, this.#errors);
  }
}
