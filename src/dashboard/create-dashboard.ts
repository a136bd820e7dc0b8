import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { deadLetterGroups } from '../dead-letters/dead-letter-groups.js';
import type { DeadLetterStore } from '../dead-letters/dead-letter-store.js';
import { HarrierError } from '../errors/harrier-error.js';
import {
  STYLESHEET,
  escapeHtml,
  maskSecrets,
  page,
  type NavFilters,
  type NavPath,
  type PageFrame,
} from './dashboard-html.js';
import {
  projectionsPage,
  topologyPage,
  type DashboardProjectionLag,
  type DashboardTopology,
} from './dashboard-insight-pages.js';
import { countMatches } from './dashboard-count.js';
import { groupsBody, listBody, recordBody } from './dashboard-pages.js';
import { parseListQuery } from './dashboard-query.js';

/** Options of {@link createDashboard}. */
export interface DashboardOptions {
  /** Where the dead letters are read from. */
  readonly deadLetters: DeadLetterStore;
  /**
   * The host the server listens on: off loopback (127.0.0.0/8, ::1, localhost) a `token` is required.
   * @defaultValue '127.0.0.1'
   */
  readonly host?: string;
  /**
   * The secret a browser must present: the `x-harrier-token` header, `Authorization: Bearer`, or the
   * cookie set when a page is first opened with `?token=`.
   * @defaultValue undefined (no check; only allowed on loopback)
   */
  readonly token?: string;
  /**
   * Whether pages may change anything (replay, purge). This slice has no actions yet; the flag is
   * shown on every page.
   * @defaultValue false
   */
  readonly allowActions?: boolean;
  /** Where the records come from, shown in the header; passwords in URLs are masked. */
  readonly source?: string;
  /** The clock of relative time windows (`since=1h`). @defaultValue Date.now */
  readonly now?: () => number;
  /**
   * Reads the endpoints, subscriptions and queue depths `GET /topology` shows, on each visit:
   * `() => admin.topology()` with a `RedisAdmin` of `harrier/redis`.
   * @defaultValue undefined (the page says what to pass)
   */
  readonly topology?: () => Promise<DashboardTopology>;
  /**
   * Reads the checkpoints and lags `GET /projections` shows, on each visit:
   * `() => admin.projectionLags()` with a `RedisAdmin` of `harrier/redis`.
   * @defaultValue undefined (the page says what to pass)
   */
  readonly projections?: () => Promise<readonly DashboardProjectionLag[]>;
}

/** A request listener for `node:http`'s `createServer`. */
export type DashboardHandler = (req: IncomingMessage, res: ServerResponse) => void;

/** Name of the cookie that carries the token after a `?token=` visit. */
export const TOKEN_COOKIE = 'harrier_dashboard_token';

/** True for a host that only this machine can reach. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '').toLowerCase();
  return bare === 'localhost' || bare === '::1' || /^127(\.\d{1,3}){3}$/.test(bare);
}

const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
  'x-frame-options': 'DENY',
} as const;

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) {
      try {
        return decodeURIComponent(part.slice(eq + 1).trim());
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

function presentedToken(req: IncomingMessage): string | undefined {
  const header = req.headers['x-harrier-token'];
  if (typeof header === 'string') return header;
  const bearer = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '');
  if (bearer?.[1] !== undefined) return bearer[1];
  return cookieValue(req.headers.cookie, TOKEN_COOKIE);
}

/**
 * The dead-letter dashboard: a `node:http` request listener that renders the store's records as
 * server-side HTML.
 *
 * @remarks
 * Read-only in this version: `GET /` lists dead letters (filters and cursor paging as query
 * parameters, `text` searches), `GET /groups` shows them grouped by fingerprint, `GET /records/:id`
 * shows one, `GET /projections` and `GET /topology` show what the `projections` and `topology`
 * sources read. Every value is escaped, and pages carry a strict
 * Content-Security-Policy (no scripts). See docs/dashboard.md.
 *
 * @throws HarrierError `invalid-option` when `host` is not loopback and no `token` is given.
 *
 * @example
 * ```ts
 * import { createServer } from 'node:http';
 * import { createDashboard } from 'harrier/dashboard';
 * createServer(createDashboard({ deadLetters: store })).listen(8080, '127.0.0.1');
 * ```
 */
export function createDashboard(options: DashboardOptions): DashboardHandler {
  const host = options.host ?? '127.0.0.1';
  const token = options.token === '' ? undefined : options.token;
  if (token === undefined && !isLoopbackHost(host)) {
    throw new HarrierError(
      'invalid-option',
      `createDashboard: host "${host}" is reachable from other machines, so a token is required: pass token (e.g. crypto.randomBytes(24).toString('base64url')), or host '127.0.0.1'`,
    );
  }
  const frame = {
    source: options.source === undefined ? undefined : maskSecrets(options.source),
    allowActions: options.allowActions === true,
  };
  const tokenDigest = token === undefined ? undefined : digest(token);
  const now = options.now ?? Date.now;
  const store = options.deadLetters;

  function send(res: ServerResponse, status: number, body: string, type: string, extra = {}): void {
    res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, ...extra });
    res.end(res.req.method === 'HEAD' ? undefined : body);
  }

  function html(
    res: ServerResponse,
    status: number,
    title: string,
    body: string,
    current?: NavPath,
    filters?: NavFilters,
  ): void {
    const frameOf: PageFrame = { ...frame, title, current, filters };
    send(res, status, page(frameOf, body), 'text/html; charset=utf-8');
  }

  function authorized(given: string | undefined): boolean {
    return tokenDigest === undefined || (given !== undefined && timingSafeEqual(digest(given), tokenDigest));
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://dashboard.invalid');
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      send(res, 405, 'Method not allowed: this dashboard is read-only\n', 'text/plain; charset=utf-8', {
        allow: 'GET, HEAD',
      });
      return;
    }
    const queryToken = url.searchParams.get('token');
    if (tokenDigest !== undefined && queryToken !== null) {
      if (!authorized(queryToken)) {
        html(
          res,
          401,
          'Token required',
          '<h1>Wrong token</h1><p>Open the dashboard with the token it was started with.</p>',
        );
        return;
      }
      // Keep the token out of the address bar, history and logs: a cookie from here on.
      url.searchParams.delete('token');
      const location = `${url.pathname}${url.search}`;
      send(res, 303, '', 'text/plain; charset=utf-8', {
        location,
        'set-cookie': `${TOKEN_COOKIE}=${encodeURIComponent(queryToken)}; HttpOnly; SameSite=Strict; Path=/`,
      });
      return;
    }
    if (!authorized(presentedToken(req))) {
      html(
        res,
        401,
        'Token required',
        '<h1>Token required</h1><p>Open the dashboard once as <code>/?token=&lt;token&gt;</code>, or send the <code>x-harrier-token</code> header.</p>',
      );
      return;
    }
    if (url.pathname === '/dashboard.css') {
      send(res, 200, STYLESHEET, 'text/css; charset=utf-8');
      return;
    }
    if (url.pathname === '/') {
      const query = parseListQuery(url.searchParams, now());
      if (query.problems.length > 0) {
        html(res, 400, 'Dead letters', listBody(query, undefined), '/', query.params);
        return;
      }
      const [records, total] = await Promise.all([
        store.list(query.filter, {
          limit: query.limit,
          ...(query.cursor !== undefined ? { cursor: query.cursor } : {}),
        }),
        countMatches(store, query.filter),
      ]);
      html(res, 200, 'Dead letters', listBody(query, { page: records, total }), '/', query.params);
      return;
    }
    if (url.pathname === '/groups') {
      const query = parseListQuery(url.searchParams, now());
      if (query.problems.length > 0) {
        html(res, 400, 'Failure groups', groupsBody(query, undefined), '/groups', query.params);
        return;
      }
      const groups = await deadLetterGroups(store, query.filter, {
        limit: query.limit,
        ...(query.cursor !== undefined ? { cursor: query.cursor } : {}),
      });
      html(res, 200, 'Failure groups', groupsBody(query, groups), '/groups', query.params);
      return;
    }
    if (url.pathname === '/topology') {
      const view = await topologyPage(options.topology);
      html(res, view.status, 'Topology', view.body, '/topology');
      return;
    }
    if (url.pathname === '/projections') {
      const view = await projectionsPage(options.projections, store);
      html(res, view.status, 'Projections', view.body, '/projections');
      return;
    }
    const record = /^\/records\/([^/]+)$/.exec(url.pathname);
    if (record?.[1] !== undefined) {
      let id: string;
      try {
        id = decodeURIComponent(record[1]);
      } catch {
        id = record[1];
      }
      const found = await store.get(id);
      if (found === undefined) {
        html(
          res,
          404,
          'Not found',
          `<h1>No dead letter ${escapeHtml(id)}</h1><p><a href="/">All dead letters</a></p>`,
        );
        return;
      }
      html(res, 200, found.type ?? 'Dead letter', recordBody(found));
      return;
    }
    html(res, 404, 'Not found', '<h1>Not found</h1><p><a href="/">All dead letters</a></p>');
  }

  return (req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (HarrierError.is(error, 'invalid-cursor')) {
        if (!res.headersSent)
          html(
            res,
            400,
            'Bad cursor',
            `<h1>Bad cursor</h1><p>${escapeHtml(error.message)}</p><p><a href="/">First page</a></p>`,
          );
        return;
      }
      const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      if (res.headersSent) {
        res.destroy();
        return;
      }
      html(
        res,
        500,
        'Store failed',
        `<h1>The dead-letter store failed</h1><p class="error">${escapeHtml(maskSecrets(text))}</p>`,
      );
    });
  };
}
