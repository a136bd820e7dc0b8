import type { SubscriptionSpec } from '../broker/message-broker.js';
import { DuplicateHandlerError } from '../errors/duplicate-handler-error.js';
import { HarrierError } from '../errors/harrier-error.js';
import { withArticle } from '../errors/with-article.js';
import { isMessageDefinition, type MessageDefinition } from '../messages/definition.js';
import {
  getHandlerMetadata,
  type HandlerClass,
  type HandlerKind,
  type HandlerOptions,
} from './handler-metadata.js';

/** A validated handler: its class, name, kind and routes. */
export interface HandlerEntry {
  readonly kind: HandlerKind;
  readonly name: string;
  readonly target: HandlerClass;
  readonly options: HandlerOptions;
  /** Method name by message type. */
  readonly methods: ReadonlyMap<string, string>;
  readonly definitions: readonly MessageDefinition[];
}

/** A short description of a value that should have been a definition. */
function describe(value: unknown): string {
  if (value === undefined || value === null) return String(value);
  if (typeof value === 'function') return `the function ${value.name || '(anonymous)'}`;
  if (typeof value === 'object') return 'an object';
  return JSON.stringify(value);
}

const kindOfHandler: Record<HandlerKind, MessageDefinition['kind']> = {
  command: 'command',
  query: 'query',
  event: 'event',
  projection: 'event',
  saga: 'event',
};

const pluralOf: Record<MessageDefinition['kind'], string> = {
  command: 'commands',
  query: 'queries',
  event: 'events',
};

const decoratorOf: Record<HandlerKind, string> = {
  command: '@CommandHandler',
  query: '@QueryHandler',
  event: '@EventHandler',
  projection: '@On',
  saga: '@StartedBy / @Handles',
};

/**
 * The handlers of one endpoint, checked at start-up.
 *
 * @remarks
 * Building it fails fast, with an error that names the fix, on an undecorated class, a handler for a
 * definition that was not made by `defineCommand`/`defineEvent`/`defineQuery`, a definition used with
 * the wrong decorator, two definitions sharing one type, two handlers for one command or query, or
 * two subscriptions with one name.
 */
export class HandlerRegistry {
  readonly #definitions = new Map<string, MessageDefinition>();
  readonly #single = new Map<string, HandlerEntry>();
  readonly #subscriptions = new Map<string, HandlerEntry>();
  readonly #entries: HandlerEntry[] = [];

  private constructor() {}

  /**
   * Checks and indexes handler classes.
   * @param extraDefinitions - definitions this endpoint sends or publishes without handling them.
   * @throws DuplicateHandlerError when two handlers claim one command or query.
   * @throws HarrierError `invalid-handler` for any other mistake, with the fix in its message.
   */
  static build(
    handlers: readonly HandlerClass[],
    extraDefinitions: readonly MessageDefinition[] = [],
  ): HandlerRegistry {
    const registry = new HandlerRegistry();
    for (const definition of extraDefinitions) registry.#addDefinition(definition, 'definitions');
    const seen = new Set<HandlerClass>();
    for (const target of handlers) {
      if (typeof target !== 'function') {
        throw new HarrierError(
          'invalid-handler',
          `handlers contains ${String(target)}, not a class: list handler classes only`,
        );
      }
      if (seen.has(target)) continue;
      seen.add(target);
      registry.#addHandler(target);
    }
    return registry;
  }

  /** Every handler entry, in the order listed. */
  entries(): readonly HandlerEntry[] {
    return this.#entries;
  }

  /** The definition of a message type known to this endpoint. */
  definition(type: string): MessageDefinition | undefined {
    return this.#definitions.get(type);
  }

  /** The handler of a command or query type. */
  singleHandler(type: string): HandlerEntry | undefined {
    return this.#single.get(type);
  }

  /** An event or projection subscription by name. */
  subscription(name: string): HandlerEntry | undefined {
    return this.#subscriptions.get(name);
  }

  /**
   * The subscriptions to register in the broker (queries are in-process and need none; projections
   * need none when an event log feeds them: pass `{ projections: false }`).
   */
  subscriptionSpecs(options: { readonly projections?: boolean } = {}): SubscriptionSpec[] {
    const projections = options.projections ?? true;
    const spec = (
      entry: HandlerEntry,
      kind: SubscriptionSpec['kind'],
      definitions: readonly MessageDefinition[],
    ): SubscriptionSpec => ({
      handler: entry.name,
      kind,
      // Old names too: messages still published under them arrive here.
      types: definitions.flatMap((d) => [d.type, ...d.aliases]),
      orderedTypes: definitions.filter((d) => d.ordered).flatMap((d) => [d.type, ...d.aliases]),
    });
    return this.#entries
      .filter((entry) => entry.kind !== 'query' && (projections || entry.kind !== 'projection'))
      .flatMap((entry) => {
        if (entry.kind !== 'saga') {
          return [spec(entry, entry.kind === 'command' ? 'command' : 'event', entry.definitions)];
        }
        // A saga is one subscription to its events, and the one handler of its commands.
        return (['event', 'command'] as const)
          .map((kind) =>
            spec(
              entry,
              kind,
              entry.definitions.filter((d) => d.kind === kind),
            ),
          )
          .filter((s) => s.types.length > 0);
      });
  }

  #addDefinition(definition: unknown, where: string): MessageDefinition {
    if (!isMessageDefinition(definition)) {
      throw new HarrierError(
        'invalid-handler',
        `${where} uses ${describe(definition)}, which is not a message definition: create it with defineCommand, defineEvent or defineQuery (an undefined here is often a circular import)`,
      );
    }
    const known = this.#definitions.get(definition.type);
    if (known !== undefined && known !== definition) {
      throw new HarrierError(
        'invalid-handler',
        `Two different definitions share the type "${definition.type}": define each message once and import it where needed`,
      );
    }
    for (const alias of definition.aliases) {
      const other = this.#definitions.get(alias);
      if (other !== undefined && other !== definition) {
        throw new HarrierError(
          'invalid-handler',
          `"${definition.type}" has the alias "${alias}", which ${other.type === alias ? 'is the type' : 'is an alias'} of another definition${other.type === alias ? '' : ` ("${other.type}")`}: keep each type name on one definition`,
        );
      }
    }
    this.#definitions.set(definition.type, definition);
    // An envelope of an older name is decoded, raised and validated by this definition.
    for (const alias of definition.aliases) this.#definitions.set(alias, definition);
    return definition;
  }

  #addHandler(target: HandlerClass): void {
    const meta = getHandlerMetadata(target);
    if (meta === undefined) {
      throw new HarrierError(
        'invalid-handler',
        `${target.name || 'An anonymous class'} is listed in handlers but has no handler decorator: add @CommandHandler, @EventHandler, @QueryHandler or @Projection`,
      );
    }
    const where = `${decoratorOf[meta.kind]} on ${meta.name}`;
    if (meta.routes.length === 0) {
      throw new HarrierError(
        'invalid-handler',
        meta.kind === 'saga'
          ? `Saga ${meta.name} has no @StartedBy(Event) method: add at least one`
          : `Projection ${meta.name} has no @On(Event) methods: add at least one`,
      );
    }
    const methods = new Map<string, string>();
    const definitions: MessageDefinition[] = [];
    for (const route of meta.routes) {
      const definition = this.#addDefinition(route.definition, where);
      const expected = kindOfHandler[meta.kind];
      // A saga takes events and commands alike (a command's one handler may be a saga step).
      if (definition.kind !== expected && !(meta.kind === 'saga' && definition.kind === 'command')) {
        throw new HarrierError(
          'invalid-handler',
          `${where} takes "${definition.type}", ${withArticle(definition.kind)}; ${decoratorOf[meta.kind]} takes ${meta.kind === 'saga' ? 'events and commands' : pluralOf[expected]} only`,
        );
      }
      const method = (target.prototype as Record<string, unknown>)[route.method];
      if (typeof method !== 'function') {
        throw new HarrierError(
          'invalid-handler',
          `${meta.name} has no method ${route.method}(payload, context): add it`,
        );
      }
      if (methods.has(definition.type)) {
        throw new HarrierError(
          'invalid-handler',
          `${meta.name} handles "${definition.type}" twice: keep one ${meta.kind === 'saga' ? '@StartedBy or @Handles' : '@On'} for it`,
        );
      }
      methods.set(definition.type, route.method);
      definitions.push(definition);
    }
    const entry: HandlerEntry = {
      kind: meta.kind,
      name: meta.name,
      target,
      options: meta.options,
      methods,
      definitions,
    };
    if (meta.kind === 'command' || meta.kind === 'query') {
      for (const d of definitions) for (const type of [d.type, ...d.aliases]) this.#addSingle(type, entry);
    } else {
      if (meta.kind === 'saga') {
        for (const d of definitions) {
          if (d.kind === 'command') for (const type of [d.type, ...d.aliases]) this.#addSingle(type, entry);
        }
      }
      const existing = this.#subscriptions.get(meta.name);
      if (existing !== undefined) {
        throw new HarrierError(
          'invalid-handler',
          `Two subscriptions are named "${meta.name}" in one endpoint: give one a distinct name with { name: '...' }`,
        );
      }
      this.#subscriptions.set(meta.name, entry);
    }
    this.#entries.push(entry);
  }

  #addSingle(type: string, entry: HandlerEntry): void {
    const existing = this.#single.get(type);
    if (existing !== undefined) throw new DuplicateHandlerError(type, existing.name, entry.name);
    this.#single.set(type, entry);
  }
}
