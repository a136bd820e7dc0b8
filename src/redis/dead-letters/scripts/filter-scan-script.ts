import type { DeadLetterFilter } from '../../../dead-letters/dead-letter-store.js';
import { redisScript } from '../../redis-support.js';
import type { DeadLetterKeys } from '../dead-letter-keys.js';
import { RECORD_FIELDS } from '../record-codec.js';
import { optionalArg, type ScriptCall } from './script-call.js';

/**
 * Index entries one filter scan script reads (see {@link FILTER_SCAN_SCRIPT}): enough that a count over
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

/** What a filter scan sends back: the selected records, their number, or their per-fingerprint sums. */
export type FilterScanMode = 'list' | 'count' | 'groups';

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
export const FILTER_SCAN_SCRIPT = redisScript(`
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
`);

/**
 * The run of {@link FILTER_SCAN_SCRIPT} that applies `filter` to the records after sequence `after`
 * in `mode`, returning at most `most` records.
 */
export function filterScanScriptCall(
  keys: DeadLetterKeys,
  filter: DeadLetterFilter,
  mode: FilterScanMode,
  after: number | undefined,
  most: number,
): ScriptCall {
  const text = filter.text;
  // Lua's lower() knows only ASCII, so only an ASCII needle can be compared in Redis.
  const textMode = text === undefined ? '' : /^[\x20-\x7e]*$/.test(text) ? 'lua' : 'node';
  const needle = text?.toLowerCase() ?? '';
  const once = JSON.stringify(needle).slice(1, -1);
  const size = textMode === '' ? FILTER_CHUNK : TEXT_FILTER_CHUNK;
  return {
    script: FILTER_SCAN_SCRIPT,
    keys: [keys.index],
    args: [
      keys.scriptRecordPrefix,
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
  };
}
