/** One subscription of an event type, as `register()` records it in `<prefix>:harrier:routes:<type>`. */
export interface Route {
  readonly endpoint: string;
  readonly handler: string;
  readonly orderedTypes: readonly string[];
}

/**
 * The event routes a publisher has read, each valid while the routes version it was read at is
 * still the current one.
 *
 * @remarks
 * `register()` moves the version ({@link routesVersion}) in the transaction that writes the routes. A publish reads the version first and then, in the same pipeline, only the routes it
 * has not cached; a version that moved drops every cached route. Routes are always read after the
 * version they are filed under, so a cached route is never older than its version says: a
 * subscriber whose `register()` resolved before a publish began is reached by that publish.
 */
export class EventRouteCache {
  /** The version the cached routes were read at; undefined before the first read. */
  #version: string | null | undefined;
  readonly #routes = new Map<string, readonly Route[]>();

  /** The types among `types` with no cached routes (whatever their version), to read with the version. */
  uncached(types: readonly string[]): string[] {
    return types.filter((type) => !this.#routes.has(type));
  }

  /** The cached routes of `types` that are valid at `version`. */
  validAt(version: string | null, types: readonly string[]): Map<string, readonly Route[]> {
    const valid = new Map<string, readonly Route[]>();
    if (version !== this.#version) return valid;
    for (const type of types) {
      const routes = this.#routes.get(type);
      if (routes !== undefined) valid.set(type, routes);
    }
    return valid;
  }

  /** Files routes read after `version` was; a different version first drops everything cached. */
  store(version: string | null, routes: ReadonlyMap<string, readonly Route[]>): void {
    if (version !== this.#version) {
      this.#routes.clear();
      this.#version = version;
    }
    for (const [type, list] of routes) this.#routes.set(type, list);
  }
}

/**
 * The routes version a publisher caches under: the stamp `register()` writes
 * (`<prefix>:harrier:routes-stamp`, a fresh UUID each time) and the registration counter
 * (`<prefix>:harrier:routes-version`); null while neither exists.
 *
 * @remarks
 * The counter alone repeats after Redis loses its data (a restart without persistence, FLUSHALL, a
 * failover to a replica behind): registrations count from 1 again, and a publisher whose cached
 * counter equals the new count would keep the routes read before the loss. The stamp never
 * repeats. The counter stays in the version so a registration by a build that only bumps the
 * counter still moves it.
 */
export function routesVersion(stamp: string | null, counter: string | null): string | null {
  return stamp === null && counter === null ? null : `${stamp ?? ''}:${counter ?? ''}`;
}

/** The routes of a `routes:<type>` hash as HGETALL returns it. */
export function parseRoutes(hash: Record<string, string>): Route[] {
  return Object.values(hash).map((value) => JSON.parse(value) as Route);
}
