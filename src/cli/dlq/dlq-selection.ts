import type {
  DeadLetterFilter,
  DeadLetterRecord,
  DeadLetterStore,
} from '../../dead-letters/dead-letter-store.js';
import { SELECTOR_OPTIONS, filterOf, narrows } from '../cli-context.js';
import { usageError } from '../cli-io.js';

/** Records per page when a command walks every match. */
const LIST_PAGE_CHUNK = 1000;

/** Every record matching `filter`, in store order. */
export async function* allMatching(
  store: DeadLetterStore,
  filter: DeadLetterFilter,
): AsyncGenerator<DeadLetterRecord[]> {
  let cursor: string | undefined;
  do {
    const page = await store.list(filter, {
      limit: LIST_PAGE_CHUNK,
      ...(cursor !== undefined ? { cursor } : {}),
    });
    if (page.records.length > 0) yield [...page.records];
    cursor = page.next;
  } while (cursor !== undefined);
}

/** What a selecting command was told to select. */
export type Selection =
  | { readonly kind: 'ids'; readonly ids: readonly string[] }
  | { readonly kind: 'filter'; readonly filter: DeadLetterFilter };

/**
 * What `harrier dlq <command>` selects: ids, or a filter (`--all` or filters).
 * @throws CliExit (usage) when ids, --all and filters are mixed, or `required` and nothing is given.
 */
export function selectionOf(
  command: string,
  positionals: readonly string[],
  values: Partial<Record<keyof typeof SELECTOR_OPTIONS, string | undefined>> & { all?: boolean | undefined },
  defaultStatus: 'dead' | 'any',
  required: boolean,
): Selection {
  const filter = filterOf(values, defaultStatus);
  const all = values.all === true;
  if (positionals.length > 0) {
    if (all || narrows(filter) || values.status !== undefined) {
      throw usageError(
        `\`harrier dlq ${command}\` takes ids, or --all, or filters: not more than one of them`,
      );
    }
    return { kind: 'ids', ids: [...new Set(positionals)] };
  }
  if (all && narrows(filter)) {
    throw usageError(`\`harrier dlq ${command}\`: --all selects everything; drop it to use filters`);
  }
  if (required && !all && !narrows(filter)) {
    throw usageError(
      `\`harrier dlq ${command}\` needs a selection: dead-letter ids, --all, or a filter such as --endpoint or --fingerprint; see --help`,
    );
  }
  return { kind: 'filter', filter };
}

/** The selection in words, for messages. */
export function describeSelection(selection: Selection): string {
  if (selection.kind === 'ids') return `ids ${selection.ids.join(', ')}`;
  const parts = Object.entries(selection.filter).map(([k, v]) => `${k}=${String(v)}`);
  return parts.join(' ');
}

/** The selected records; for ids, one entry per id (undefined when missing). */
export async function selectRecords(
  store: DeadLetterStore,
  selection: Selection,
): Promise<(DeadLetterRecord | undefined)[]> {
  if (selection.kind === 'ids') return Promise.all(selection.ids.map((id) => store.get(id)));
  const out: DeadLetterRecord[] = [];
  for await (const records of allMatching(store, selection.filter)) out.push(...records);
  return out;
}
