export type {
  AppendAck,
  AppendInput,
  EventLog,
  LogCapabilities,
  LogRecord,
  MaintenanceOptions,
  SubscribeOptions,
  TopicInfo,
  TopicSpec,
} from './event-log.js';
export type {
  Checkpoint,
  CheckpointStore,
  CommitOptions,
  ProjectionGeneration,
  RebuildMarker,
} from './checkpoint-store.js';
export { checkPartition, checkSchema, indexTopics, partitionFor, topicInfo, topicOf } from './topics.js';
export { InMemoryEventLog, type InMemoryEventLogOptions } from './in-memory-event-log.js';
export { InMemoryCheckpointStore } from './in-memory-checkpoint-store.js';
export { isRequestedRebuild, REQUESTED_REBUILD_PREFIX } from './checkpoint-store.js';
export { FileEventLog, type FileEventLogOptions } from './file-event-log.js';
export type { FileEventLogRepair } from './open-partition.js';
export type { FileEventLogLostOffsets } from './partition-state.js';
