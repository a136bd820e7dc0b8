import { pageHref } from './dashboard-query.js';

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

/** Text made safe for HTML content and quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

/** Text with the password of every `scheme://user:password@` URL in it replaced by `***`. */
export function maskSecrets(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/\/[^\s:/@]*:)[^\s@/]*@/gi, '$1***@');
}

/** A time (ms since the epoch) as ISO 8601, or `-`. */
export function isoTime(ms: number | undefined): string {
  return ms === undefined || !Number.isFinite(ms) ? '-' : new Date(ms).toISOString();
}

/** The stylesheet every page links (served at `/dashboard.css`, so the CSP needs no inline style). */
export const STYLESHEET = `body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6rem 1rem;display:flex;flex-wrap:wrap;gap:1rem;align-items:baseline}
header a,header .brand{color:#fff;text-decoration:none;font-weight:600}header .meta{color:#b8c0d0;font-size:12px}
header nav{display:flex;gap:.9rem}header nav a{color:#d5dbe6;font-weight:400}header nav a:hover{color:#fff;text-decoration:underline}
header nav strong{color:#fff;border-bottom:2px solid #7fb0ff}
main{padding:1rem}h1{font-size:18px;margin:0 0 .8rem}h2{font-size:15px;margin:1.2rem 0 .4rem}
table{border-collapse:collapse;background:#fff;width:100%}th,td{border:1px solid #dde1e8;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600}td.num{text-align:right}code,pre{font:12px/1.4 ui-monospace,monospace}
pre{background:#fff;border:1px solid #dde1e8;padding:.6rem;overflow:auto;max-height:32rem;white-space:pre-wrap;word-break:break-all}
form.filters{display:flex;flex-wrap:wrap;gap:.5rem;align-items:end;margin-bottom:.8rem}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:#4a5366}
input,select,button{font:inherit;padding:.2rem .4rem}form.filters input{width:10rem}td.when{white-space:nowrap}.error{color:#a4161a}.muted{color:#6b7385}
nav.paging{margin:.6rem 0;display:flex;gap:1rem}dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;background:#fff;padding:.6rem;border:1px solid #dde1e8}
dt{font-weight:600}dd{margin:0}
tr.failed td{background:#fdecec}td.failed,td.failed a{color:#a4161a;font-weight:600}tr.total td{font-weight:600;background:#eef0f4}
.status{display:inline-block;padding:0 .4rem;border-radius:3px;font-size:12px;font-weight:600}
.status.ok{background:#e3f4e6;color:#1b6b2a}.status.behind{background:#fff1d6;color:#8a5300}.status.none{background:#eef0f4;color:#4a5366}
section.insight{margin-bottom:1.4rem}form.actions{display:flex;gap:.4rem;align-items:center;margin:.4rem 0}`;

/** The pages the header links, by path. */
export const NAV_PAGES = [
  ['/', 'Dead letters'],
  ['/groups', 'Groups'],
  ['/projections', 'Projections'],
  ['/topology', 'Topology'],
  ['/outbox', 'Outbox'],
  ['/schedules', 'Schedules'],
] as const;

/** A page the header links. */
export type NavPath = (typeof NAV_PAGES)[number][0];

/** The dead-letter filters the header's Dead letters and Groups links carry over between those two pages. */
export type NavFilters = ReadonlyMap<string, string>;

/** Everything a page's frame shows besides its body. */
export interface PageFrame {
  readonly title: string;
  /** Where the records come from, already masked (e.g. a Redis URL without its password). */
  readonly source: string | undefined;
  readonly allowActions: boolean;
  /** Whether the header links the parked outbox rows (the dashboard was given an outbox). */
  readonly outbox?: boolean;
  /** Whether the header links the recurring schedules (the dashboard was given a schedule store). */
  readonly schedules?: boolean;
  /** Reload the page every second (a replay in progress); a meta refresh, as the CSP allows no script. */
  readonly refresh?: boolean;
  /** The page shown, marked in the navigation; undefined for pages the header does not link. */
  readonly current?: NavPath | undefined;
  /**
   * The list or groups page's filters, kept by the links between those two pages so a filtered view
   * can be seen either way; other links start unfiltered.
   */
  readonly filters?: NavFilters | undefined;
}

function nav(frame: PageFrame): string {
  const shown = NAV_PAGES.filter(
    ([path]) =>
      (path !== '/outbox' || frame.outbox === true) && (path !== '/schedules' || frame.schedules === true),
  );
  const links = shown.map(([path, label]) => {
    if (path === frame.current) return `<strong aria-current="page">${label}</strong>`;
    const keepsFilters = frame.current === '/' || frame.current === '/groups';
    const href =
      keepsFilters && frame.filters !== undefined && (path === '/' || path === '/groups')
        ? pageHref(path, frame.filters)
        : path;
    return `<a href="${escapeHtml(href)}">${label}</a>`;
  });
  return `<nav data-testid="pages" aria-label="Pages">${links.join('')}</nav>`;
}

/** A whole page: `body` must already be escaped HTML. */
export function page(frame: PageFrame, body: string): string {
  const source = frame.source === undefined ? '' : ` · ${escapeHtml(frame.source)}`;
  const mode = frame.allowActions ? 'actions allowed' : 'read-only';
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
${frame.refresh === true ? '<meta http-equiv="refresh" content="1">' : ''}<title>${escapeHtml(frame.title)} · Harrier</title><link rel="stylesheet" href="/dashboard.css"></head>
<body><header><a href="/">Harrier</a>${nav(frame)}<span class="meta">${mode}${source}</span></header>
<main>${body}</main></body></html>
`;
}

/**
 * A page shown before the visitor is known (the sign-in page, a refused request): styled like the
 * others but without navigation or the header's source and mode, so it tells a stranger nothing about
 * the store. `body` must already be escaped HTML.
 */
export function barePage(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${escapeHtml(title)} · Harrier</title><link rel="stylesheet" href="/dashboard.css"></head>
<body><header><span class="brand">Harrier</span></header>
<main>${body}</main></body></html>
`;
}
