/**
 * A noun with its indefinite article, for error messages: `a command`, `an event`, `a query`.
 *
 * @remarks
 * Messages built from a kind or a name read `an event`, never `a event`; the article follows the
 * noun's first letter, which is right for every word Harrier puts there.
 */
export function withArticle(noun: string): string {
  return `${/^[aeiou]/i.test(noun) ? 'an' : 'a'} ${noun}`;
}
