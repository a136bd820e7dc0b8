import type { SubscriptionSpec } from './message-broker.js';

/** Where a command type is handled: the endpoint that registered it, and whether as ordered. */
export interface CommandRoute {
  readonly endpoint: string;
  /** True when that endpoint registered the type among its `orderedTypes`. */
  readonly ordered: boolean;
}

/**
 * The command routes a publisher has found registered (each type's endpoint, and whether it orders
 * the type), trusted while the routes version they were read at is the current one, and taken on
 * trust for at most `maxAgeMs` after it was last read.
 *
 * @remarks
 * A command publish reads nothing for a type it knows, which keeps the send path at one round
 * trip. Routes can be removed (an endpoint registered again without the type), so knowing a type
 * for ever would keep accepting commands nobody consumes: once `maxAgeMs` has passed since the
 * version was last confirmed (by any publish, events included), the next command publish reads it
 * again, and a changed version forgets every type. A type not found is never kept: its endpoint
 * may register at any time.
 */
export class CommandRouteCache {
  readonly #maxAgeMs: number;
  readonly #routes = new Map<string, CommandRoute>();
  /** The routes version the types were read at; undefined before the first read. */
  #version: string | null | undefined;
  /** When the version was last confirmed, in the caller's clock; never yet: -Infinity. */
  #confirmedAt = -Infinity;

  /** @param maxAgeMs - how long a confirmed version is trusted without reading it again. */
  constructor(maxAgeMs: number) {
    this.#maxAgeMs = maxAgeMs;
  }

  /** Whether `type` was found registered at the current version (however old that knowledge is). */
  knows(type: string): boolean {
    return this.#routes.has(type);
  }

  /** The route of `type` found at the current version, if any. */
  routeOf(type: string): CommandRoute | undefined {
    return this.#routes.get(type);
  }

  /** Whether the version was confirmed less than `maxAgeMs` before `now`. */
  isFresh(now: number): boolean {
    return now - this.#confirmedAt < this.#maxAgeMs;
  }

  /**
   * Files the routes version read at `now`: a different one than the types were read at forgets
   * them all. Returns true when it did.
   */
  confirm(version: string | null, now: number): boolean {
    this.#confirmedAt = now;
    if (version === this.#version) return false;
    this.#version = version;
    this.#routes.clear();
    return true;
  }

  /** Adds routes found registered, read after the version last confirmed. */
  learn(routes: ReadonlyMap<string, CommandRoute>): void {
    for (const [type, route] of routes) this.#routes.set(type, route);
  }
}

/**
 * The command routes of the endpoint registrations `register()` records (endpoint -> JSON of
 * `{ subscriptions, registeredAt }`, the Redis broker's `endpoints` hash). A type registered by
 * several endpoints (a command type has one handler in a system: the others are registrations left
 * by an endpoint it moved from) is routed to the one that registered last; registrations that
 * cannot be read are skipped.
 */
export function parseCommandRoutes(registrations: Record<string, string>): Map<string, CommandRoute> {
  const routes = new Map<string, CommandRoute & { readonly registeredAt: number }>();
  for (const [endpoint, json] of Object.entries(registrations)) {
    let registration: { subscriptions?: unknown; registeredAt?: unknown };
    try {
      registration = JSON.parse(json) as typeof registration;
    } catch {
      continue;
    }
    if (!Array.isArray(registration.subscriptions)) continue;
    const registeredAt = typeof registration.registeredAt === 'number' ? registration.registeredAt : 0;
    for (const sub of registration.subscriptions as Partial<SubscriptionSpec>[]) {
      if (sub.kind !== 'command' || !Array.isArray(sub.types)) continue;
      const ordered: unknown[] = Array.isArray(sub.orderedTypes) ? sub.orderedTypes : [];
      for (const type of sub.types) {
        if (typeof type !== 'string') continue;
        const known = routes.get(type);
        // The later registration wins; between two at the same time, the first endpoint name wins,
        // so every publisher picks the same one.
        if (
          known !== undefined &&
          (known.registeredAt > registeredAt ||
            (known.registeredAt === registeredAt && known.endpoint < endpoint))
        )
          continue;
        routes.set(type, { endpoint, ordered: ordered.includes(type), registeredAt });
      }
    }
  }
  return new Map([...routes].map(([type, { endpoint, ordered }]) => [type, { endpoint, ordered }]));
}
