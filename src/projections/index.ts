export {
  ProjectionRunner,
  type PartitionStatus,
  type PoisonPolicy,
  type ProjectionRunnerOptions,
  type ProjectionStatus,
  type ResettableProjection,
} from './projection-runner.js';
