/** The parts of `RedisDeadLetterStore`: its keys, record codec, chunk and group decoding, list cursor and scripts. */
export { decodeChunkEntries } from './chunk-entries.js';
export type { ChunkEntry } from './chunk-entries.js';
export { DeadLetterKeys } from './dead-letter-keys.js';
export { decodeFilterChunk, isSelected } from './filter-chunk.js';
export type { FilterChunk } from './filter-chunk.js';
export { aggregatedStatuses, decodeGroupsPage } from './group-aggregates.js';
export { GroupSums, groupWithSample } from './group-sums.js';
export type { SampleRef } from './group-sums.js';
export { decodeListCursor, encodeListCursor } from './list-cursor.js';
export { decodeRecord, encodeRecordData } from './record-codec.js';
export {
  addScriptCall,
  countScriptCall,
  filterScanScriptCall,
  groupsScriptCall,
  markReplayHandledScriptCall,
  markReplayedScriptCall,
  purgeScriptCall,
  readChunkScriptCall,
  removeScriptCall,
} from './scripts/index.js';
export type { FilterScanMode, ScriptCall } from './scripts/index.js';
