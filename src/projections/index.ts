export {
  ProjectionRunner,
  type PartitionStatus,
  type PoisonPolicy,
  type ProjectionRunnerOptions,
  type ProjectionStatus,
  type ResettableProjection,
} from './projection-runner.js';
export { checkpointLags, lagBehind, type CheckpointLag, type CheckpointLagSource } from './projection-lag.js';
