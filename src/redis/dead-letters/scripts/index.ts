/** The Lua scripts of `RedisDeadLetterStore`, one a file, each with the call that lays out its keys and arguments. */
export { addScriptCall } from './add-script.js';
export { countScriptCall } from './count-script.js';
export { filterScanScriptCall } from './filter-scan-script.js';
export type { FilterScanMode } from './filter-scan-script.js';
export { groupsScriptCall } from './groups-script.js';
export { markReplayHandledScriptCall } from './mark-replay-handled-script.js';
export { markReplayedScriptCall } from './mark-replayed-script.js';
export { purgeScriptCall } from './purge-script.js';
export { readChunkScriptCall } from './read-chunk-script.js';
export { removeScriptCall } from './remove-script.js';
export type { ScriptCall } from './script-call.js';
