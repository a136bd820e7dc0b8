export {
  defineCommand,
  defineEvent,
  defineQuery,
  isMessageDefinition,
  upcasters,
  type BackoffOptions,
  type CommandDefinition,
  type CommandOptions,
  type DedupeMode,
  type DefinitionOptions,
  type EventDefinition,
  type EventOptions,
  type InputOf,
  type MessageDefinition,
  type MessageKind,
  type PartitionKeyOption,
  type PayloadOf,
  type QueryDefinition,
  type QueryOptions,
  type ResultOf,
  type RetryOptions,
  type UpcasterChain,
  type Upcasters,
} from './definition.js';
export {
  ENVELOPE_VERSION,
  envelopeMetaSchema,
  envelopeSchema,
  type Envelope,
  type EnvelopeMeta,
} from './envelope.js';
export {
  DEFAULT_MAX_ENVELOPE_BYTES,
  decodeEnvelope,
  encodeEnvelope,
  encodedSize,
  traceparentOfBody,
  type DecodeFailure,
  type DecodeFailureReason,
  type DecodeOptions,
  type DecodeResult,
  type DecodeSuccess,
} from './codec.js';
export { deterministicUuidV7, isUuidV7, uuidV7Time, uuidv7 } from './uuid-v7.js';
export { fnv1a64, partitionOf } from './partition.js';
export {
  createEnvelopeSigner,
  type EnvelopeSigner,
  type SigningKeyInput,
  type SigningOptions,
} from './signing.js';
export {
  prepareMessage,
  type CausingMessage,
  type EnvelopeEncoder,
  type OutgoingTraceInfo,
  type TraceparentProvider,
  type PreparedMessage,
  type PrepareContext,
} from './prepare-message.js';
