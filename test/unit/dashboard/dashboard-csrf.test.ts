import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { CSRF_COOKIE, CsrfTokens, crossSiteRefusal } from '../../../src/dashboard/dashboard-csrf.js';

function request(headers: Record<string, string>): IncomingMessage {
  return { headers } as unknown as IncomingMessage;
}

describe('crossSiteRefusal', () => {
  it.each([
    ['its own origin', { host: '127.0.0.1:8080', origin: 'http://127.0.0.1:8080' }],
    ['https through a TLS-terminating proxy', { host: 'ops.example', origin: 'https://ops.example' }],
    ['an IPv6 loopback host', { host: '[::1]:8080', origin: 'http://[::1]:8080' }],
    ['a host in capitals', { host: 'OPS.example:8080', origin: 'http://ops.example:8080' }],
    ['a same-origin Referer', { host: 'ops.example', referer: 'http://ops.example/groups?x=1' }],
    [
      'Sec-Fetch-Site same-origin',
      { host: 'ops.example', origin: 'http://ops.example', 'sec-fetch-site': 'same-origin' },
    ],
  ])('accepts %s', (_, headers) => {
    expect(crossSiteRefusal(request(headers))).toBeUndefined();
  });

  it.each([
    ['another port', { host: '127.0.0.1:8080', origin: 'http://127.0.0.1:9090' }, 'is not this dashboard'],
    ['another host', { host: 'ops.example', origin: 'http://ops.example.evil' }, 'is not this dashboard'],
    ['a non-web scheme', { host: 'ops.example', origin: 'file://ops.example' }, 'is not a page of'],
    ['no Host header', { origin: 'http://ops.example' }, 'no Host header'],
    [
      'Sec-Fetch-Site none',
      { host: 'ops.example', origin: 'http://ops.example', 'sec-fetch-site': 'none' },
      'Sec-Fetch-Site: none',
    ],
  ])('refuses %s', (_, headers, why) => {
    expect(crossSiteRefusal(request(headers))).toContain(why);
  });
});

describe('CsrfTokens', () => {
  it('keeps a token it issued and replaces any other', () => {
    const tokens = new CsrfTokens();
    const issued = tokens.issue();
    expect(tokens.forRequest(request({ cookie: `${CSRF_COOKIE}=${issued}` }))).toEqual({
      token: issued,
      setCookie: undefined,
    });
    const foreign = new CsrfTokens().issue();
    const replaced = tokens.forRequest(request({ cookie: `a=b; ${CSRF_COOKIE}=${foreign}` }));
    expect(replaced.token).not.toBe(foreign);
    expect(tokens.valid(replaced.token)).toBe(true);
    expect(replaced.setCookie).toBe(`${CSRF_COOKIE}=${replaced.token}; HttpOnly; SameSite=Strict; Path=/`);
  });

  it('passes only a field equal to a cookie it issued', () => {
    const tokens = new CsrfTokens();
    const issued = tokens.issue();
    const withCookie = request({ cookie: `${CSRF_COOKIE}=${issued}` });
    expect(tokens.refusal(withCookie, issued)).toBeUndefined();
    expect(tokens.refusal(withCookie, undefined)).toContain('missing');
    expect(tokens.refusal(withCookie, tokens.issue())).toContain('does not match');
    const other = new CsrfTokens().issue();
    expect(tokens.refusal(request({ cookie: `${CSRF_COOKIE}=${other}` }), other)).toContain('not issued');
  });
});
