export {
  MAX_REPLAY_HISTORY,
  type DeadLetterFilter,
  type DeadLetterGroup,
  type DeadLetterGroupPage,
  type DeadLetterGroupPageOptions,
  type DeadLetterPage,
  type DeadLetterPageOptions,
  type DeadLetterReason,
  type DeadLetterRecord,
  type DeadLetterStatus,
  type DeadLetterStore,
  type LogPosition,
  type ReplayRecord,
} from './dead-letter-store.js';
export {
  buildDeadLetterRecord,
  deadLetterId,
  fingerprintOf,
  type DeadLetterInput,
} from './dead-letter-record.js';
export { deadLetterGroups } from './dead-letter-groups.js';
export { deadLetterVersion } from './dead-letter-version.js';
export { replayOutcome, type ReplayOutcome } from './replay-outcome.js';
export { parseDeadLetterRecord, type ParsedDeadLetterRecord } from './parse-dead-letter-record.js';
export { matchesDeadLetterFilter, selectsEveryDeadLetter } from './matches-dead-letter-filter.js';
export {
  InMemoryDeadLetterStore,
  type InMemoryDeadLetterStoreOptions,
} from './in-memory-dead-letter-store.js';
export {
  replayDeadLetters,
  summarizeReplay,
  type ProjectionReplayer,
  type ReplayDeadLettersOptions,
  type ReplayErrorCode,
  type ReplayFailure,
  type ReplayRefusal,
  type ReplayResult,
  type ReplayRunOptions,
  type ReplaySuccess,
  type ReplaySummary,
  type ReplayTelemetry,
  type ReplayTraceInfo,
} from './replay-dead-letters.js';
