const SCHEME = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//;

/** The scheme of `text` in lower case (`redis` of `redis://host`), or undefined when it has none. */
export function schemeOf(text: string): string | undefined {
  return SCHEME.exec(text)?.[1]?.toLowerCase();
}

/** `text` with its user name and password hidden, for messages. */
export function redactUrl(text: string): string {
  return text.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/)[^/?#]*@/, '$1***@');
}
