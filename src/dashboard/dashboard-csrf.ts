import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** Name of the cookie that holds the browser's CSRF token. */
export const CSRF_COOKIE = 'harrier_dashboard_csrf';

/** Name of the hidden form field that must repeat the CSRF cookie on every POST. */
export const CSRF_FIELD = 'csrf';

/** The value of cookie `name` in a `Cookie` header, URL-decoded; undefined when absent or malformed. */
export function cookieValue(header: string | undefined, name: string): string | undefined {
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

/** True when `a` and `b` are equal, compared in time independent of where they differ. */
export function sameSecret(a: string, b: string): boolean {
  const digest = (text: string): Buffer => createHash('sha256').update(text, 'utf8').digest();
  return timingSafeEqual(digest(a), digest(b));
}

/**
 * Per-browser CSRF tokens for the dashboard's forms (the double-submit pattern: a cookie, repeated in
 * a hidden field).
 *
 * @remarks
 * A token is a random nonce with an HMAC under a key only this dashboard instance knows, so a cookie
 * planted by another site on the same host (cookies ignore ports) is not a valid token; a restart
 * makes new keys, and the next page view hands out a fresh token.
 */
export class CsrfTokens {
  readonly #key = randomBytes(32);

  #mac(nonce: string): string {
    return createHmac('sha256', this.#key).update(nonce).digest('base64url');
  }

  /** A new token. */
  issue(): string {
    const nonce = randomBytes(18).toString('base64url');
    return `${nonce}.${this.#mac(nonce)}`;
  }

  /** True when `token` was issued by this instance. */
  valid(token: string | undefined): token is string {
    const dot = token?.indexOf('.') ?? -1;
    if (token === undefined || dot <= 0) return false;
    return sameSecret(token.slice(dot + 1), this.#mac(token.slice(0, dot)));
  }

  /**
   * The token of the browser behind `req`: its cookie's when valid, else a new one with the
   * `Set-Cookie` value that hands it out.
   */
  forRequest(req: IncomingMessage): { readonly token: string; readonly setCookie: string | undefined } {
    const held = cookieValue(req.headers.cookie, CSRF_COOKIE);
    if (this.valid(held)) return { token: held, setCookie: undefined };
    const token = this.issue();
    return { token, setCookie: `${CSRF_COOKIE}=${token}; HttpOnly; SameSite=Strict; Path=/` };
  }

  /** Why a POST with form field value `field` fails the check, or undefined when it passes. */
  refusal(req: IncomingMessage, field: string | undefined): string | undefined {
    const cookie = cookieValue(req.headers.cookie, CSRF_COOKIE);
    if (cookie === undefined || field === undefined || field === '') {
      return 'the CSRF token is missing: submit the form from a dashboard page (reload it first if it is old)';
    }
    if (!sameSecret(cookie, field)) {
      return 'the CSRF token does not match this browser’s: reload the page and submit it again';
    }
    if (!this.valid(cookie)) {
      return 'the CSRF token was not issued by this dashboard (it may have restarted): reload the page and submit it again';
    }
    return undefined;
  }
}

/**
 * Why a POST looks cross-site, or undefined when it comes from the dashboard's own pages: its
 * `Origin` (or, without one, its `Referer`'s origin) must name the host in its `Host` header, and a
 * `Sec-Fetch-Site` header, when the browser sends one, must say `same-origin`.
 *
 * @remarks
 * The scheme is not compared: behind a TLS-terminating proxy the dashboard sees http while the
 * browser says https, and another scheme on the very same host and port is not another site's page.
 */
export function crossSiteRefusal(req: IncomingMessage): string | undefined {
  const site = req.headers['sec-fetch-site'];
  if (typeof site === 'string' && site !== 'same-origin') {
    return `the browser says this request comes from another page (Sec-Fetch-Site: ${site}); actions are accepted only from the dashboard's own pages`;
  }
  const host = req.headers.host;
  if (host === undefined || host === '') return 'the request has no Host header';
  let from: string;
  let header: 'Origin' | 'Referer';
  if (typeof req.headers.origin === 'string') {
    from = req.headers.origin;
    header = 'Origin';
  } else if (typeof req.headers.referer === 'string') {
    from = req.headers.referer;
    header = 'Referer';
  } else {
    return 'the request carries neither Origin nor Referer, so where it comes from is unknown; browsers send Origin with every form POST';
  }
  let url: URL;
  try {
    url = new URL(from);
  } catch {
    return `${header} "${from}" is not a URL of this dashboard (${host})`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return `${header} "${from}" is not a page of this dashboard (${host})`;
  }
  let own: string;
  try {
    own = new URL(`${url.protocol}//${host}`).host;
  } catch {
    return `the Host header "${host}" is not a host`;
  }
  return url.host === own ? undefined : `${header} ${url.origin} is not this dashboard (${own})`;
}
