import { systemClock, type Clock } from '../clock/clock.js';
import { ReceivedHandlerContext } from '../dispatch/handler-context.js';
import type { PipelineStep, StepResult, StepRunner } from '../dispatch/step-runner.js';
import type { TransactionalUnitOfWork, UnitOfWorkResult } from '../dispatch/transactional-unit-of-work.js';
import { HarrierError } from '../errors/harrier-error.js';
import { UnrecoverableError } from '../errors/unrecoverable-error.js';
import type { HandlerClass } from '../handlers/handler-metadata.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import type { OutgoingMessage } from '../messages/outgoing-message.js';
import { versionWaitRetryAt } from '../dispatch/version-wait.js';
import { KeyedLock } from './keyed-lock.js';
import { SAGA_ID_HEADER, SAGA_NAME_HEADER, SagaStepContext } from './saga-context.js';
import {
  getSagaMetadata,
  SAGA_APPLIED_MAX_BYTES,
  sagaLimitsOf,
  sagaStateVersionOf,
  type SagaLimits,
  type SagaMetadata,
  type SagaStateVersion,
  type SagaStepMetadata,
} from './saga-metadata.js';
import type {
  SagaAppliedStep,
  SagaStore,
  SagaStoreCall,
  SagaTimeoutRecord,
  SagaWrite,
} from './saga-store.js';

/** Options of {@link createSagaStepRunner}. */
export interface SagaStepRunnerOptions {
  /** The `@Saga` classes of the endpoint. */
  readonly sagas: readonly HandlerClass[];
  /** Where instances are loaded from and saved to. */
  readonly store: SagaStore;
  /** @defaultValue the system clock */
  readonly clock?: Clock;
  /** @defaultValue warnings and errors as JSON lines on stderr */
  readonly logger?: Logger;
  /**
   * The unit of work each step runs in, read at every step: the bus answers the unit once the store
   * joined it at start ({@link SagaStore.joinUnitOfWork}), else undefined.
   * @defaultValue none: steps read and save through the store alone, then publish
   */
  readonly unitOfWork?: () => TransactionalUnitOfWork | undefined;
}

/** A `@Saga` class checked and indexed once. */
interface CompiledSaga {
  readonly meta: SagaMetadata;
  readonly steps: ReadonlyMap<string, SagaStepMetadata>;
  readonly limits: SagaLimits;
  readonly state: SagaStateVersion;
}

function compile(target: HandlerClass): CompiledSaga {
  const meta = getSagaMetadata(target);
  if (meta === undefined) {
    throw new HarrierError(
      'invalid-handler',
      `${target.name || 'An anonymous class'} is listed in sagas but has no @Saga decorator: add @Saga('name', { state })`,
    );
  }
  const steps = new Map<string, SagaStepMetadata>();
  for (const step of meta.steps) {
    const type = (step.definition as { type?: unknown } | undefined)?.type;
    if (typeof type === 'string') steps.set(type, step);
  }
  if (!meta.steps.some((step) => step.starts)) {
    throw new HarrierError(
      'invalid-handler',
      `Saga ${meta.name} has no @StartedBy(Event) method: add one, or no instance is ever created`,
    );
  }
  return {
    meta,
    steps,
    limits: sagaLimitsOf(meta.name, meta.options),
    state: sagaStateVersionOf(meta.name, meta.options),
  };
}

/**
 * The saga step on the one handler pipeline: correlate, load the instance, run the step, save the
 * state by compare-and-set, then publish what the step recorded.
 *
 * @remarks
 * Steps of one instance run one at a time in this process (a lock per saga id); across processes
 * the store's compare-and-set decides: a step that lost re-runs on the fresh state, so no update is
 * lost. The state is saved before the step's messages are published, and their ids derive from the
 * saga, the saga id, the handled message and their position, so a redelivered message republishes
 * the same ids (which the idempotent publish drops) and never changes the state twice.
 *
 * With `unitOfWork` answering a unit, each try of a step is one call of the unit: the store reads
 * and saves the instance in the unit's transaction (found through the step's context), beside the
 * step's own writes, the inbox row and the outbox rows; a conflict rolls the whole try back before
 * the step re-runs, and a step that dead-letters its message commits nothing.
 *
 * A stored state of an older `version` of the saga is raised by its upcast steps before it is parsed
 * (an upcaster that throws dead-letters the message); one of a newer version (saved by newer code)
 * is neither parsed nor overwritten: the message is released, spending no attempt, to wait for a
 * worker that knows that version. Every save records the saga's version. See docs/sagas.md.
 * @throws HarrierError `invalid-handler` for a class without `@Saga` or without `@StartedBy`.
 */
export function createSagaStepRunner(options: SagaStepRunnerOptions): StepRunner {
  const clock = options.clock ?? systemClock;
  const logger = options.logger ?? consoleLogger;
  const sagas = new Map<string, CompiledSaga>();
  for (const target of options.sagas) {
    const compiled = compile(target);
    sagas.set(compiled.meta.name, compiled);
  }
  const lock = new KeyedLock();

  return async (step) => {
    const saga = sagas.get(step.entry.name);
    const route = saga?.steps.get(step.envelope.type);
    if (saga === undefined || route === undefined) {
      throw new HarrierError(
        'internal',
        `No saga step for "${step.envelope.type}" in "${step.entry.name}": list the saga class in sagas`,
      );
    }
    const sagaId = correlate(saga, route, step);
    step.sagaInstance?.({ saga: saga.meta.name, id: sagaId });
    return lock.run(`${saga.meta.name}\u0000${sagaId}`, () =>
      runStep({ saga, route, step, sagaId, store: options.store, clock, logger }, options.unitOfWork?.()),
    );
  };
}

/** The saga id a message is for: a timeout's header, else the step's correlation. */
function correlate(saga: CompiledSaga, route: SagaStepMetadata, step: PipelineStep): string {
  const { envelope } = step;
  const headers = envelope.meta.headers;
  const name = saga.meta.name;
  if (headers[SAGA_NAME_HEADER] === name && headers[SAGA_ID_HEADER] !== undefined) {
    return headers[SAGA_ID_HEADER];
  }
  const { correlate: how } = route;
  if (how === undefined) {
    throw new UnrecoverableError(
      `Saga "${name}" cannot tell which instance "${envelope.type}" is for: it carries no saga id (only a timeout requested with ctx.requestTimeout does) and its @Handles has no correlate: add { correlate: 'field' } or a function`,
    );
  }
  let value: unknown;
  if (typeof how === 'function') {
    const context = new ReceivedHandlerContext(
      envelope,
      step.attempt,
      step.endpoint,
      name,
      step.signal,
      step.env,
    );
    value = how(envelope.payload as never, context as never);
  } else {
    value = (envelope.payload as Record<string, unknown> | null)?.[how];
  }
  if (typeof value === 'number' && Number.isFinite(value)) value = String(value);
  if (typeof value !== 'string' || value === '') {
    const what = typeof how === 'function' ? 'its correlate function returned' : `its field "${how}" is`;
    throw new UnrecoverableError(
      `Saga "${name}" cannot correlate "${envelope.type}" (message ${envelope.id}): ${what} ${value === undefined ? 'undefined' : JSON.stringify(value)}, not a saga id: return a non-empty string`,
    );
  }
  return value;
}

interface StepRun {
  readonly saga: CompiledSaga;
  readonly route: SagaStepMetadata;
  readonly step: PipelineStep;
  readonly sagaId: string;
  readonly store: SagaStore;
  readonly clock: Clock;
  readonly logger: Logger;
}

/** What one try of a step decided: its result, and the messages to publish once it is committed. */
interface Tried {
  readonly result: StepResult;
  readonly publish: readonly OutgoingMessage[];
  /** True when `publish` is what the step recorded in this try (a unit's outbox stored it). */
  readonly recorded: boolean;
}

/**
 * Ends a try in a unit of work whose transaction must not commit: the step dead-letters its message,
 * or releases it to wait for newer code.
 */
class NotAppliedDecided extends Error {
  constructor(readonly result: StepResult) {
    super('The saga step dead-letters or releases its message');
  }
}

async function runStep(run: StepRun, unit: TransactionalUnitOfWork | undefined): Promise<StepResult> {
  const { saga, step, sagaId } = run;
  const name = saga.meta.name;
  for (let attempt = 1; ; attempt++) {
    const context = new SagaStepContext(
      step.envelope,
      step.attempt,
      step.endpoint,
      name,
      step.signal,
      step.env,
      sagaId,
    );
    try {
      if (unit === undefined) {
        const tried = await tryStep(run, context, undefined);
        await step.publish(tried.publish);
        return tried.result;
      }
      return await tryInUnit(run, unit, context);
    } catch (error) {
      if (HarrierError.is(error, 'saga-conflict') && attempt < saga.limits.conflictTries) continue;
      throw error;
    }
  }
}

/**
 * One try of a step in the unit of work's transaction: the instance read and saved in it, with the
 * step's own writes, its inbox row and its outgoing messages (the outbox), committed together.
 */
async function tryInUnit(
  run: StepRun,
  unit: TransactionalUnitOfWork,
  context: SagaStepContext,
): Promise<StepResult> {
  const { step } = run;
  const box: { tried?: Tried } = {};
  let ended: UnitOfWorkResult;
  try {
    ended = await unit.run({
      context,
      handler: step.entry.name,
      handlerKind: 'saga',
      endpoint: step.endpoint,
      inProcess: false,
      run: async () => {
        const tried = await tryStep(run, context, { context });
        // Rolled back: a replay of the dead letter, or the released message's next delivery, must
        // find no inbox row of this message.
        if (tried.result.kind !== 'handled') throw new NotAppliedDecided(tried.result);
        box.tried = tried;
      },
      abandoned: () => step.abandoned?.() === true,
    });
  } catch (error) {
    if (error instanceof NotAppliedDecided) return error.result;
    throw error;
  }
  const { tried } = box;
  // Applied before (the inbox holds the message): its state, rows and messages committed then.
  if (ended === 'skipped' || tried === undefined) return { kind: 'handled', outgoing: [] };
  // With an outbox (`stored`) what the step recorded was stored in the transaction; messages of an
  // earlier save found in the applied steps are published again, idempotent by id.
  if (ended !== 'stored' || !tried.recorded) await step.publish(tried.publish, { committed: true });
  return tried.result;
}

/**
 * One try of a step: read the instance, decide, run the step and save by compare-and-set (rejects
 * with `saga-conflict` when another step saved first). `call` is given in a unit of work.
 */
async function tryStep(
  run: StepRun,
  context: SagaStepContext,
  call: SagaStoreCall | undefined,
): Promise<Tried> {
  const { saga, route, step, sagaId, store } = run;
  const { envelope } = step;
  const name = saga.meta.name;
  const isTimeout =
    envelope.meta.headers[SAGA_NAME_HEADER] === name && envelope.meta.headers[SAGA_ID_HEADER] === sagaId;
  const instance = await (call === undefined ? store.get(name, sagaId) : store.get(name, sagaId, call));
  // A third-party store may leave `applied` out.
  const earlier = instance?.applied ?? [];
  const applied = earlier.find((a) => a.message === envelope.id);
  if (applied !== undefined) {
    // Saved by an earlier delivery of this message: publish its messages again (same ids).
    return {
      result: { kind: 'handled', outgoing: applied.outgoing },
      publish: applied.outgoing,
      recorded: false,
    };
  }
  let timeouts: readonly SagaTimeoutRecord[] = instance?.timeouts ?? [];
  if (isTimeout) {
    // Fired already, or the instance completed (which drops its timeouts) or is gone: never again.
    if (instance?.status !== 'active' || !timeouts.some((t) => t.id === envelope.id)) {
      run.logger.info('Saga timeout no longer pending; dropped', {
        saga: name,
        sagaId,
        type: envelope.type,
        messageId: envelope.id,
      });
      return { result: { kind: 'handled', outgoing: [] }, publish: [], recorded: false };
    }
    timeouts = timeouts.filter((t) => t.id !== envelope.id);
  }
  if (instance === undefined && !route.starts) {
    return {
      result: rule(run, 'onMissing', 'saga-not-found', `no instance "${sagaId}" exists`),
      publish: [],
      recorded: false,
    };
  }
  if (instance?.status === 'completed') {
    return {
      result: rule(run, 'onCompleted', 'saga-completed', `instance "${sagaId}" has completed`),
      publish: [],
      recorded: false,
    };
  }
  // A third-party store may leave `stateVersion` out: its states are of version 1.
  const stateVersion = instance?.stateVersion ?? 1;
  if (instance !== undefined && stateVersion > saga.state.version) {
    return { result: tooNew(run, stateVersion, instance.updatedAt), publish: [], recorded: false };
  }
  const before =
    instance === undefined
      ? parseState(saga, saga.meta.options.initial?.() ?? {}, 'initial state')
      : parseStored(saga, instance.state, stateVersion);
  context.load(instance === undefined, before, timeouts);
  await step.invoke(context);
  const state = parseState(saga, context.state, `state after "${envelope.type}"`);
  const outgoing = context.recorded.map((p) => p.outgoing);
  const now = run.clock.now();
  const write: SagaWrite = {
    saga: name,
    id: sagaId,
    state,
    stateVersion: saga.state.version,
    applied: keptApplied(run, [...earlier, { message: envelope.id, outgoing, at: now }], now),
    status: context.completed ? 'completed' : 'active',
    timeouts: context.completed ? [] : context.timeouts,
    now,
  };
  const version = instance?.version ?? 0;
  await (call === undefined ? store.save(write, version) : store.save(write, version, call));
  return { result: { kind: 'handled', outgoing }, publish: outgoing, recorded: true };
}

/**
 * The applied steps to save, oldest first: each of the newest `keepApplied` and every one saved less
 * than `keepAppliedMs` ago, then the oldest dropped (with a warning) while their JSON exceeds
 * {@link SAGA_APPLIED_MAX_BYTES}; the newest step (the one being saved) always stays.
 */
function keptApplied(run: StepRun, steps: readonly SagaAppliedStep[], now: number): SagaAppliedStep[] {
  const { keepApplied, keepAppliedMs } = run.saga.limits;
  const kept = steps.filter(
    (step, index) => index >= steps.length - keepApplied || now - (step.at ?? 0) < keepAppliedMs,
  );
  const sizes = kept.map((step) => Buffer.byteLength(JSON.stringify(step), 'utf8'));
  let bytes = sizes.reduce((sum, size) => sum + size, 0);
  let drop = 0;
  while (bytes > SAGA_APPLIED_MAX_BYTES && drop < kept.length - 1) bytes -= sizes[drop++] ?? 0;
  if (drop > 0) {
    run.logger.warn(
      `Saga "${run.saga.meta.name}" instance "${run.sagaId}" forgot its ${drop} oldest applied steps before keepApplied or keepAppliedMs would: their messages exceed ${SAGA_APPLIED_MAX_BYTES} bytes of JSON; a redelivery of one of them runs its step again. Keep step messages small, or lower keepApplied`,
      { saga: run.saga.meta.name, sagaId: run.sagaId, forgotten: drop, bytes },
    );
  }
  return kept.slice(drop);
}

/**
 * The step's result for an instance whose state was saved by newer code (a rolling deploy): its
 * message goes back, spending no attempt, to wait for a worker that knows the state's version, and
 * is dead-lettered as `version-unsupported` once the state has waited a day since that save. The
 * state is neither parsed nor overwritten.
 */
function tooNew(run: StepRun, stateVersion: number, savedAt: number): StepResult {
  const { envelope } = run.step;
  const name = run.saga.meta.name;
  const known = run.saga.state.version;
  const message = `Saga "${name}" instance "${run.sagaId}" state was saved with version ${stateVersion}, and this process knows versions up to ${known}: deploy the code with version ${stateVersion} of @Saga('${name}')`;
  const now = run.clock.now();
  const age = now - savedAt;
  const retryAt = versionWaitRetryAt(age, now);
  if (retryAt === undefined) {
    return {
      kind: 'dead-letter',
      reason: 'version-unsupported',
      error: {
        name: 'SagaStateVersionError',
        message: `${message}; "${envelope.type}" (message ${envelope.id}) waited ${Math.round(age / 3_600_000)} hours for such a worker: replay it once one runs`,
        code: 'version-unsupported',
      },
    };
  }
  run.logger.warn(
    'Saga state is newer than this code; the message goes back to wait for a worker that knows its version',
    {
      saga: name,
      sagaId: run.sagaId,
      type: envelope.type,
      messageId: envelope.id,
      stateVersion,
      knownVersion: known,
      attempt: run.step.attempt,
      retryAt,
    },
  );
  return { kind: 'release', retryAt, error: new HarrierError('version-unsupported', message) };
}

/**
 * A stored state raised from its version to the saga's, then parsed by the saga's schema (defaults
 * of fields added since, transforms).
 */
function parseStored(saga: CompiledSaga, stored: unknown, from: number): unknown {
  let raised = structuredClone(stored);
  const { version } = saga.state;
  if (from < version) {
    try {
      raised = saga.state.upcast(raised, from);
    } catch (error) {
      throw new UnrecoverableError(
        `Saga "${saga.meta.name}" stored state version ${from} could not be raised to version ${version}: an upcast step threw ${error instanceof Error ? error.message : String(error)}; fix the upcaster and replay the message (the stored state is unchanged)`,
        { cause: error },
      );
    }
  }
  const parsed = saga.meta.options.state.safeParse(raised);
  if (!parsed.success) {
    throw new UnrecoverableError(
      `Saga "${saga.meta.name}" stored state${from < version ? ` (raised from version ${from} to ${version})` : ''} does not match its state schema: ${parsed.error.message}; give the saga a new version with an upcast step, migrate the stored state or relax the schema (e.g. .optional() or .default() for a new field)`,
      { cause: parsed.error },
    );
  }
  return parsed.data;
}

function parseState(saga: CompiledSaga, value: unknown, what: string): unknown {
  const parsed = saga.meta.options.state.safeParse(value);
  if (!parsed.success) {
    throw new UnrecoverableError(
      `Saga "${saga.meta.name}" ${what} does not match its state schema: ${parsed.error.message}`,
      { cause: parsed.error },
    );
  }
  return parsed.data;
}

/** Applies the saga's rule for a message its instance cannot take. */
function rule(
  run: StepRun,
  option: 'onMissing' | 'onCompleted',
  reason: 'saga-not-found' | 'saga-completed',
  why: string,
): StepResult {
  const { envelope } = run.step;
  const name = run.saga.meta.name;
  const setting = run.saga.meta.options[option] ?? 'ignore';
  const message = `Saga "${name}" got "${envelope.type}" (message ${envelope.id}) but ${why}`;
  if (setting === 'dead-letter') {
    return {
      kind: 'dead-letter',
      reason,
      error: {
        name: reason === 'saga-not-found' ? 'SagaNotFoundError' : 'SagaCompletedError',
        message: `${message}; ${option} is 'dead-letter'`,
        code: reason,
      },
    };
  }
  const fields = { saga: name, sagaId: run.sagaId, type: envelope.type, messageId: envelope.id };
  // A message for a missing instance is more often a mistake than one after completion.
  if (option === 'onMissing') run.logger.warn(`${message}; ignored (onMissing: 'ignore')`, fields);
  else run.logger.info(`${message}; ignored (onCompleted: 'ignore')`, fields);
  return { kind: 'handled', outgoing: [] };
}
