import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { OutboxAdmin } from '../admin/outbox-admin.js';
import type { Topology } from '../admin/topology.js';
import { DashboardActions, type ActionResponder } from './dashboard-actions.js';
import { cookieValue } from './dashboard-csrf.js';
import type { DashboardReplay } from './replay-jobs.js';
import { deadLetterGroups } from '../dead-letters/dead-letter-groups.js';
import type { DeadLetterStore } from '../dead-letters/dead-letter-store.js';
import type { CheckpointLag } from '../projections/projection-lag.js';
import type { ScheduleStore } from '../schedules/schedule-store.js';
import { HarrierError } from '../errors/harrier-error.js';
import {
  STYLESHEET,
  barePage,
  escapeHtml,
  maskSecrets,
  page,
  type NavFilters,
  type NavPath,
  type PageFrame,
} from './dashboard-html.js';
import { projectionsPage, topologyPage } from './dashboard-insight-pages.js';
import { outboxPage } from './dashboard-outbox-page.js';
import { schedulesPage } from './dashboard-schedules-page.js';
import { countBeside, countMatches } from './dashboard-count.js';
import { groupsBody, listBody, recordBody } from './dashboard-pages.js';
import { parseListQuery } from './dashboard-query.js';
import { TOKEN_GUESSES_PER_SECOND, TokenGuessLimit } from './token-guess-limit.js';

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
   * cookie set when a page is first opened with `?token=`. At least {@link MIN_TOKEN_LENGTH}
   * characters; each client address may present {@link TOKEN_GUESSES_PER_SECOND} wrong ones a
   * second, then gets 429 until its allowance refills.
   * @defaultValue undefined (no check; only allowed on loopback)
   */
  readonly token?: string;
  /**
   * Whether pages may change anything: purge, and replay when `replay` is given too. Without it
   * every POST answers 403 and no page shows a form that changes anything.
   * @defaultValue false
   */
  readonly allowActions?: boolean;
  /**
   * Host names (as in the request's `Host` header, without the port) this dashboard answers to
   * besides loopback names and `host`, when it has no `token`: a page of another site whose name
   * re-resolves to this machine (DNS rebinding) sends its own name, and is refused (403). Add the
   * name a reverse proxy forwards, or give a token, which makes the check moot.
   * @defaultValue []
   */
  readonly allowedHosts?: readonly string[];
  /**
   * How to replay dead letters, with `allowActions`: pass `(ids, o) => bus.replayDeadLetters(ids, o)`
   * (`harrier dashboard --allow-actions` passes the same replay as `harrier dlq replay`).
   * @defaultValue none (no replay buttons; a line on the pages says what to pass)
   */
  readonly replay?: DashboardReplay;
  /** Where the records come from, shown in the header; passwords in URLs are masked. */
  readonly source?: string;
  /**
   * The clock of relative time windows (`since=1h`), of replay jobs and of the limit on wrong
   * tokens: with `replay`, pass the bus's clock, so a job's start compares with the replay times the
   * bus records.
   * @defaultValue Date.now
   */
  readonly now?: () => number;
  /**
   * Reads the endpoints, subscriptions and queue depths `GET /topology` shows, on each visit:
   * `() => admin.topology()` with the `TransportAdmin` of the system's broker (a `RedisAdmin` of
   * `harrier/redis`). Each subscription's dead letters are counted in `deadLetters`.
   * @defaultValue undefined (the page says what to pass)
   */
  readonly topology?: () => Promise<Topology>;
  /**
   * Reads the checkpoints and lags `GET /projections` shows, on each visit:
   * `() => admin.projectionLags()` with the `StoreAdmin` of the system's stores (a `RedisAdmin` of
   * `harrier/redis`).
   * @defaultValue undefined (the page says what to pass)
   */
  readonly projections?: () => Promise<readonly CheckpointLag[]>;
  /**
   * The parked rows of the system's transactional outbox, shown at `GET /outbox` (linked from the
   * header when given), each with a replay button under `allowActions`: a `PostgresOutboxAdmin` of
   * `harrier/postgres`, or `admin.outboxAdmin?.()` of a system admin. The dashboard does not close it.
   * @defaultValue undefined (no Outbox page in the header; `/outbox` says what to pass)
   */
  readonly outbox?: OutboxAdmin;
  /**
   * The store of the system's recurring schedules (`bus.every`), read by `GET /schedules` on each
   * visit (linked from the header when given): `admin.scheduleStore()` of a system admin (a
   * `RedisAdmin` of `harrier/redis`, a `PostgresAdmin` of `harrier/postgres`). The page only reads
   * it; the dashboard does not close it.
   * @defaultValue undefined (no Schedules page in the header; `/schedules` says what to pass)
   */
  readonly schedules?: ScheduleStore;
}

/** A request listener for `node:http`'s `createServer`. */
export type DashboardHandler = (req: IncomingMessage, res: ServerResponse) => void;

/** Name of the cookie that carries the token after a `?token=` visit. */
export const TOKEN_COOKIE = 'harrier_dashboard_token';

/** The shortest `token` {@link createDashboard} accepts: shorter ones can be guessed. */
export const MIN_TOKEN_LENGTH = 16;

/** True for a host that only this machine can reach. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '').toLowerCase();
  return bare === 'localhost' || bare === '::1' || /^127(\.\d{1,3}){3}$/.test(bare);
}

const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  // same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with the page's
  // own form POSTs, and the cross-site check needs their real origin.
  'referrer-policy': 'same-origin',
  'cache-control': 'no-store',
  'x-frame-options': 'DENY',
} as const;

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
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
 * `GET /` lists dead letters (filters and cursor paging as query
 * parameters, `text` searches), `GET /groups` shows them grouped by fingerprint, `GET /records/:id`
 * shows one, `GET /projections` and `GET /topology` show what the `projections` and `topology`
 * sources read. With `allowActions`, POST `/actions/replay` and `/actions/purge` replay (as a job
 * shown at `/replays/:job`) or purge, behind same-origin and CSRF checks. Every value is escaped, and
 * pages carry a strict Content-Security-Policy (no scripts). See docs/dashboard.md.
 *
 * @throws HarrierError `invalid-option` when `host` is not loopback and no `token` is given, or when
 * `token` is shorter than {@link MIN_TOKEN_LENGTH} characters.
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
  if (token !== undefined && token.length < MIN_TOKEN_LENGTH) {
    throw new HarrierError(
      'invalid-option',
      `createDashboard: the token has ${token.length} character${token.length === 1 ? '' : 's'}, and one under ${MIN_TOKEN_LENGTH} can be guessed: pass a random one of at least ${MIN_TOKEN_LENGTH} (e.g. crypto.randomBytes(24).toString('base64url'), 32 characters)`,
    );
  }
  const frame = {
    source: options.source === undefined ? undefined : maskSecrets(options.source),
    allowActions: options.allowActions === true,
    outbox: options.outbox !== undefined,
    schedules: options.schedules !== undefined,
  };
  const tokenDigest = token === undefined ? undefined : digest(token);
  const guesses = new TokenGuessLimit();
  const now = options.now ?? Date.now;
  const store = options.deadLetters;
  const actions = frame.allowActions
    ? new DashboardActions({
        store,
        replay: options.replay,
        now,
        outbox: options.outbox,
        schedules: options.schedules,
      })
    : undefined;

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
    refresh = false,
  ): void {
    const frameOf: PageFrame = { ...frame, title, current, filters, ...(refresh ? { refresh } : {}) };
    send(res, status, page(frameOf, body), 'text/html; charset=utf-8');
  }

  /** A page for a visitor not known yet: nothing about the store, no navigation. */
  function bare(res: ServerResponse, status: number, title: string, body: string, extra = {}): void {
    send(res, status, barePage(title, body), 'text/html; charset=utf-8', extra);
  }

  function responder(res: ServerResponse): ActionResponder {
    return {
      html: (status, title, body, opts) => {
        html(res, status, title, body, undefined, undefined, opts?.refresh === true);
      },
      seeOther: (location) => {
        send(res, 303, '', 'text/plain; charset=utf-8', { location });
      },
    };
  }

  function authorized(given: string | undefined): boolean {
    return tokenDigest === undefined || (given !== undefined && timingSafeEqual(digest(given), tokenDigest));
  }

  const knownHosts = new Set([host, ...(options.allowedHosts ?? [])].map((name) => name.toLowerCase()));
  /**
   * Without a token, only requests addressed to this machine's own names are served: a page whose
   * host name re-resolves to 127.0.0.1 (DNS rebinding) is same-origin to the browser and would
   * otherwise read every page and pass the cross-site checks. With a token such a page has no
   * token to send, so any name is fine (a machine's addresses are not known in advance).
   */
  function hostAllowed(header: string | undefined): boolean {
    if (tokenDigest !== undefined) return true;
    if (header === undefined) return false;
    let name: string;
    try {
      name = new URL(`http://${header}`).hostname.toLowerCase();
    } catch {
      return false;
    }
    return isLoopbackHost(name) || knownHosts.has(name) || knownHosts.has(name.replace(/^\[|\]$/g, ''));
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://dashboard.invalid');
    } catch {
      // An absolute-form target that is no URL (`GET http://[`): the client's mistake, not the store's.
      bare(
        res,
        400,
        'Bad request',
        '<h1>Bad request</h1><p>The request names no page of this dashboard.</p>',
      );
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD' && req.method !== 'POST') {
      send(res, 405, 'Method not allowed\n', 'text/plain; charset=utf-8', { allow: 'GET, HEAD, POST' });
      return;
    }
    if (!hostAllowed(req.headers.host)) {
      send(
        res,
        403,
        `Host "${String(req.headers.host)}" is not this dashboard's address: open it as http://127.0.0.1 or localhost, or start it with a token (or allowedHosts) to reach it by another name\n`,
        'text/plain; charset=utf-8',
      );
      return;
    }
    // The one page a visitor without the token may load: the sign-in page is styled by it.
    if (url.pathname === '/dashboard.css' && req.method !== 'POST') {
      send(res, 200, STYLESHEET, 'text/css; charset=utf-8');
      return;
    }
    const client = req.socket.remoteAddress ?? '';
    if (tokenDigest !== undefined) {
      const waitMs = guesses.waitMs(client, now());
      if (waitMs > 0) {
        req.resume();
        bare(
          res,
          429,
          'Too many tries',
          `<h1>Too many wrong tokens</h1><p>This address presented more than ${TOKEN_GUESSES_PER_SECOND} wrong tokens a second: try again in a moment.</p>`,
          { 'retry-after': String(Math.ceil(waitMs / 1000)) },
        );
        return;
      }
    }
    const queryToken = url.searchParams.get('token');
    if (tokenDigest !== undefined && queryToken !== null && req.method !== 'POST') {
      if (!authorized(queryToken)) {
        guesses.wrong(client, now());
        bare(
          res,
          401,
          'Sign in',
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
    const given = presentedToken(req);
    if (!authorized(given)) {
      // A visit without a token is no guess; only a wrong one spends the address's tries.
      if (given !== undefined) guesses.wrong(client, now());
      req.resume();
      bare(
        res,
        401,
        'Sign in',
        '<h1>Sign in</h1><p>Open the dashboard once as <code>/?token=&lt;token&gt;</code>, or send the <code>x-harrier-token</code> header.</p>',
      );
      return;
    }
    if (req.method === 'POST') {
      if (actions === undefined) {
        req.resume();
        html(
          res,
          403,
          'Read-only',
          '<h1>Read-only</h1><p class="error" role="alert">This dashboard was started without --allow-actions (createDashboard without allowActions: true), so nothing can be changed from it.</p>',
        );
      } else await actions.post(req, url.pathname, responder(res));
      return;
    }
    // Handed out on every page, so any form the browser shows carries a token it also holds.
    const csrf = actions?.csrf.forRequest(req);
    if (csrf?.setCookie !== undefined) res.setHeader('set-cookie', csrf.setCookie);
    const view = csrf === undefined ? undefined : actions?.view(csrf.token);
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
      const shown = countBeside(total, records, query.cursor === undefined);
      html(
        res,
        200,
        'Dead letters',
        listBody(query, { page: records, total: shown }, view),
        '/',
        query.params,
      );
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
      html(res, 200, 'Failure groups', groupsBody(query, groups, view), '/groups', query.params);
      return;
    }
    if (url.pathname === '/topology') {
      const shown = await topologyPage(options.topology, store);
      html(res, shown.status, 'Topology', shown.body, '/topology');
      return;
    }
    if (url.pathname === '/projections') {
      const shown = await projectionsPage(options.projections, store);
      html(res, shown.status, 'Projections', shown.body, '/projections');
      return;
    }
    if (url.pathname === '/outbox') {
      const replayed = Number(url.searchParams.get('replayed') ?? Number.NaN);
      const shown = await outboxPage(
        options.outbox,
        url.searchParams.get('cursor') ?? undefined,
        view?.csrf,
        Number.isSafeInteger(replayed) && replayed >= 0 ? replayed : undefined,
      );
      html(res, shown.status, 'Outbox', shown.body, '/outbox');
      return;
    }
    if (url.pathname === '/schedules') {
      const cancelled = url.searchParams.get('cancelled');
      const gone = url.searchParams.get('gone');
      const shown = await schedulesPage(options.schedules, now(), view?.csrf, {
        ...(cancelled !== null ? { cancelled } : {}),
        ...(gone !== null ? { gone } : {}),
      });
      html(res, shown.status, 'Schedules', shown.body, '/schedules');
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
      html(res, 200, found.type ?? 'Dead letter', recordBody(found, view));
      return;
    }
    const job = /^\/replays\/([^/]+)$/.exec(url.pathname);
    if (job?.[1] !== undefined && actions !== undefined) {
      await actions.jobPage(job[1], responder(res));
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
