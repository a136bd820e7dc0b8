import type { IncomingMessage } from 'node:http';
import type { OutboxAdmin } from '../admin/outbox-admin.js';
import type { ScheduleStore } from '../schedules/schedule-store.js';
import type { DeadLetterStore } from '../dead-letters/dead-letter-store.js';
import {
  backHref,
  confirmPurgeBody,
  describeSelection,
  jobBody,
  jobIsLive,
  purgedBody,
  type ActionSelection,
  type ActionView,
} from './dashboard-action-html.js';
import { CSRF_FIELD, CsrfTokens, crossSiteRefusal } from './dashboard-csrf.js';
import { escapeHtml as h } from './dashboard-html.js';
import { parseListQuery } from './dashboard-query.js';
import { ReplayJobs, jobRows, type DashboardReplay } from './replay-jobs.js';

/** Largest request body an action accepts (a form of ids), in bytes. */
export const MAX_BODY_BYTES = 1024 * 1024;

/** Most records one replay from the dashboard takes (`harrier dlq replay` has no limit). */
export const MAX_REPLAY_RECORDS = 10_000;

/** Records read per page when a group or filter is resolved to ids. */
const RESOLVE_PAGE = 500;

/** How an action answers; the dashboard's frame and security headers are the caller's. */
export interface ActionResponder {
  html(status: number, title: string, body: string, options?: { readonly refresh?: boolean }): void;
  /** 303 See Other to `location`, so a reload of the next page does not send the form again. */
  seeOther(location: string): void;
}

/** Options of {@link DashboardActions}. */
export interface DashboardActionsOptions {
  readonly store: DeadLetterStore;
  readonly replay: DashboardReplay | undefined;
  /** The clock replays are timed by: the bus's, so a job's start compares with its replay records. */
  readonly now: () => number;
  /** The parked outbox rows `/actions/outbox-replay` moves back, when the dashboard has them. */
  readonly outbox?: OutboxAdmin | undefined;
  /** The recurring schedules `/actions/schedule-cancel` removes from, when the dashboard has them. */
  readonly schedules?: ScheduleStore | undefined;
}

/** Why a request body could not be read as a form. */
type BodyProblem = { readonly status: 413 | 415; readonly message: string };

function refusedPage(respond: ActionResponder, status: number, title: string, why: string): void {
  respond.html(
    status,
    title,
    `<h1>${h(title)}</h1><p class="error" role="alert">${h(why)}</p><p><a href="/">Back to the dead letters</a></p>`,
  );
}

/** Reads an urlencoded form of at most {@link MAX_BODY_BYTES}. */
function readForm(req: IncomingMessage): Promise<URLSearchParams | BodyProblem> {
  const type = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
  if (type !== 'application/x-www-form-urlencoded') {
    req.resume();
    return Promise.resolve({
      status: 415,
      message: `actions take a form (application/x-www-form-urlencoded), not ${type === '' ? 'no body type' : type}`,
    });
  }
  const tooLarge: BodyProblem = {
    status: 413,
    message: `the form is larger than ${MAX_BODY_BYTES} bytes: select fewer records, or select a group instead`,
  };
  if (Number(req.headers['content-length'] ?? 0) > MAX_BODY_BYTES) return Promise.resolve(tooLarge);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        // Stop reading: the answer closes the connection, so the rest is never buffered.
        req.pause();
        req.removeAllListeners('data');
        resolve(tooLarge);
      } else chunks.push(chunk);
    });
    req.on('end', () => {
      resolve(new URLSearchParams(Buffer.concat(chunks).toString('utf8')));
    });
    req.on('error', reject);
  });
}

/**
 * The dashboard's actions (replay, purge) and replay jobs, behind the cross-site checks.
 *
 * @remarks
 * Made only when the dashboard allows actions. Every POST must come from the dashboard's own origin
 * and repeat the browser's CSRF cookie in a form field; replays run in the background as jobs kept
 * in memory, and their pages refresh themselves until every replayed message has an outcome.
 */
export class DashboardActions {
  readonly #store: DeadLetterStore;
  readonly #replay: DashboardReplay | undefined;
  readonly #now: () => number;
  readonly #outbox: OutboxAdmin | undefined;
  readonly #schedules: ScheduleStore | undefined;
  readonly #jobs = new ReplayJobs();
  /** The CSRF tokens of this dashboard instance. */
  readonly csrf = new CsrfTokens();

  constructor(options: DashboardActionsOptions) {
    this.#store = options.store;
    this.#replay = options.replay;
    this.#now = options.now;
    this.#outbox = options.outbox;
    this.#schedules = options.schedules;
  }

  /** What pages need to draw forms for the browser holding `csrfToken`. */
  view(csrfToken: string): ActionView {
    return { csrf: csrfToken, replay: this.#replay !== undefined };
  }

  /** Serves a POST to `path`: checks where it comes from and its token, then runs the action. */
  async post(req: IncomingMessage, path: string, respond: ActionResponder): Promise<void> {
    const crossSite = crossSiteRefusal(req);
    if (crossSite !== undefined) {
      req.resume();
      refusedPage(respond, 403, 'Refused: cross-site request', crossSite);
      return;
    }
    const form = await readForm(req);
    if (!(form instanceof URLSearchParams)) {
      refusedPage(respond, form.status, form.status === 413 ? 'Form too large' : 'Not a form', form.message);
      return;
    }
    const csrf = this.csrf.refusal(req, form.get(CSRF_FIELD) ?? undefined);
    if (csrf !== undefined) {
      refusedPage(respond, 403, 'Refused: CSRF token', csrf);
      return;
    }
    if (path === '/actions/outbox-replay') {
      await this.#replayOutbox(form, respond);
      return;
    }
    if (path === '/actions/schedule-cancel') {
      await this.#cancelSchedule(form, respond);
      return;
    }
    if (path !== '/actions/replay' && path !== '/actions/purge') {
      refusedPage(
        respond,
        404,
        'No such action',
        `${path} is not an action: use /actions/replay, /actions/purge, /actions/outbox-replay or /actions/schedule-cancel`,
      );
      return;
    }
    const selection = this.#selectionOf(form);
    if (typeof selection === 'string') {
      refusedPage(respond, 400, 'Nothing selected', selection);
      return;
    }
    const csrfToken = form.get(CSRF_FIELD) ?? '';
    if (path === '/actions/replay') await this.#startReplay(selection, respond);
    else {
      // A filter's confirmation says how many it counted; a form without it purges nothing.
      const counted = Number(form.get('count'));
      await this.#purge(
        selection,
        form.get('confirm') === 'yes',
        Number.isSafeInteger(counted) && counted > 0 ? counted : 0,
        csrfToken,
        respond,
      );
    }
  }

  /** Moves the parked outbox rows of the form's `id` fields back into the outbox. */
  async #replayOutbox(form: URLSearchParams, respond: ActionResponder): Promise<void> {
    const outbox = this.#outbox;
    if (outbox === undefined) {
      refusedPage(
        respond,
        404,
        'No outbox',
        'This dashboard was given no outbox: pass outbox (a PostgresOutboxAdmin of harrier/postgres) to createDashboard.',
      );
      return;
    }
    const ids = [...new Set(form.getAll('id').filter((id) => id !== ''))];
    if (ids.length === 0) {
      refusedPage(respond, 400, 'Nothing selected', 'Pick a parked row with its Replay button.');
      return;
    }
    let replayed = 0;
    for (const id of ids) if (await outbox.replayParked(id)) replayed += 1;
    respond.seeOther(`/outbox?replayed=${replayed}`);
  }

  /**
   * Removes the recurring schedule of the form's `name` from the store, as `harrier schedules cancel`
   * does: every process running it stops at its next tick.
   */
  async #cancelSchedule(form: URLSearchParams, respond: ActionResponder): Promise<void> {
    const schedules = this.#schedules;
    if (schedules === undefined) {
      refusedPage(
        respond,
        404,
        'No schedules',
        'This dashboard was given no schedule store: pass schedules (admin.scheduleStore() of a RedisAdmin or PostgresAdmin) to createDashboard.',
      );
      return;
    }
    const name = form.get('name') ?? '';
    if (name === '') {
      refusedPage(respond, 400, 'Nothing selected', 'Pick a schedule with its Cancel button.');
      return;
    }
    const removed = await schedules.delete(name);
    respond.seeOther(`/schedules?${removed ? 'cancelled' : 'gone'}=${encodeURIComponent(name)}`);
  }

  /** Serves GET /replays/:job. */
  async jobPage(id: string, respond: ActionResponder): Promise<void> {
    const job = this.#jobs.get(id);
    if (job === undefined) {
      refusedPage(
        respond,
        404,
        'No such replay',
        'Replays are kept in memory by the dashboard that ran them (the last 20), and are gone when it restarts.',
      );
      return;
    }
    const rows = await jobRows(job, this.#store);
    const tracksHandled = typeof this.#store.markReplayHandled === 'function';
    const live = jobIsLive(job, rows, tracksHandled);
    respond.html(200, 'Replay', jobBody(job, rows, tracksHandled), { refresh: live });
  }

  #selectionOf(form: URLSearchParams): ActionSelection | string {
    const ids = [...new Set(form.getAll('id').filter((id) => id !== ''))];
    if (ids.length > 0) return { kind: 'ids', ids };
    if (form.get('scope') === 'filter') {
      // A confirmation carries the time its count was made, so `since=1h` means the same records.
      const asOf = Number(form.get('asOf'));
      const query = parseListQuery(form, Number.isSafeInteger(asOf) && asOf > 0 ? asOf : this.#now());
      if (query.problems.length > 0) return query.problems.join('; ');
      return { kind: 'filter', params: query.params, filter: query.filter };
    }
    return 'Select at least one dead letter (tick its box in the list), or use a group’s buttons.';
  }

  /** The ids of a selection, at most {@link MAX_REPLAY_RECORDS} + 1 (so a caller knows it is over). */
  async #idsOf(selection: ActionSelection): Promise<readonly string[]> {
    if (selection.kind === 'ids') return selection.ids;
    const ids: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.#store.list(selection.filter, {
        limit: RESOLVE_PAGE,
        ...(cursor !== undefined ? { cursor } : {}),
      });
      for (const record of page.records) ids.push(record.id);
      cursor = page.next;
    } while (cursor !== undefined && ids.length <= MAX_REPLAY_RECORDS);
    return ids;
  }

  async #startReplay(selection: ActionSelection, respond: ActionResponder): Promise<void> {
    if (this.#replay === undefined) {
      refusedPage(
        respond,
        403,
        'Replay is off',
        'This dashboard was given no replay: pass replay: (ids, o) => bus.replayDeadLetters(ids, o) to createDashboard, or run harrier dashboard --allow-actions.',
      );
      return;
    }
    const ids = await this.#idsOf(selection);
    if (ids.length > MAX_REPLAY_RECORDS) {
      refusedPage(
        respond,
        400,
        'Too many to replay here',
        `More than ${MAX_REPLAY_RECORDS} records match ${describeSelection(selection)}: narrow the filters, or use harrier dlq replay, which has no limit.`,
      );
      return;
    }
    if (ids.length === 0) {
      respond.html(
        200,
        'Nothing to replay',
        `<h1>Nothing to replay</h1><p>No dead letters match ${h(describeSelection(selection))}.</p><p><a href="${h(backHref(selection))}">Back</a></p>`,
      );
      return;
    }
    const job = this.#jobs.start(ids, describeSelection(selection), this.#now(), this.#replay);
    respond.seeOther(`/replays/${job.id}`);
  }

  /**
   * The first `count` records of a filter, in the store's order (first insertion): those the
   * confirmation counted, since records that fail later come after them. Never more than `count`, so a
   * purge deletes no record the operator was not told of.
   */
  async #counted(selection: ActionSelection & { kind: 'filter' }, count: number): Promise<string[]> {
    const ids: string[] = [];
    let cursor: string | undefined;
    while (ids.length < count) {
      const page = await this.#store.list(selection.filter, {
        limit: Math.min(RESOLVE_PAGE, count - ids.length),
        ...(cursor !== undefined ? { cursor } : {}),
      });
      for (const record of page.records) ids.push(record.id);
      cursor = page.next;
      if (cursor === undefined) break;
    }
    return ids.slice(0, count);
  }

  async #purge(
    selection: ActionSelection,
    confirmed: boolean,
    counted: number,
    csrfToken: string,
    respond: ActionResponder,
  ): Promise<void> {
    if (confirmed) {
      const removed =
        selection.kind === 'ids'
          ? await this.#store.remove(selection.ids)
          : await this.#store.remove(await this.#counted(selection, counted));
      respond.html(200, 'Purged', purgedBody(selection, removed));
      return;
    }
    const picked =
      selection.kind === 'ids'
        ? (await Promise.all(selection.ids.map((id) => this.#store.get(id)))).filter((r) => r !== undefined)
        : [];
    const count = selection.kind === 'ids' ? picked.length : await this.#store.count(selection.filter);
    if (count === 0) {
      respond.html(
        200,
        'Nothing to purge',
        `<h1>Nothing to purge</h1><p>No dead letters match ${h(describeSelection(selection))}.</p><p><a href="${h(backHref(selection))}">Back</a></p>`,
      );
      return;
    }
    respond.html(
      200,
      'Purge?',
      confirmPurgeBody(this.view(csrfToken), selection, count, picked, this.#now()),
    );
  }
}
