import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The test folders from the one whose files take longest to the quickest: the fault and example
 * tests of test/e2e run for seconds to minutes each, the conformance suites for tens of seconds, the
 * integration files for a few seconds, the unit files for well under one.
 */
const FOLDERS = ['test/e2e/', 'test/contract/', 'test/integration/', 'test/unit/'];

/**
 * Starts the slowest files first, so the run does not end waiting on one long file that started
 * late: by folder ({@link FOLDERS}), then as vitest orders them (longest first by the durations of
 * the last run where it has them, else largest first). A checkout with no vitest cache, as on CI,
 * gets the same head of the run as a warm one.
 */
export class SlowestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const { root } = this.ctx.config;
    const rank = (file: TestSpecification): number => {
      const path = relative(root, file.moduleId).replaceAll('\\', '/');
      const index = FOLDERS.findIndex((folder) => path.startsWith(folder));
      return index === -1 ? FOLDERS.length : index;
    };
    const byHistory = await super.sort(files);
    return byHistory
      .map((file, order) => ({ file, order, rank: rank(file) }))
      .sort((a, b) => a.rank - b.rank || a.order - b.order)
      .map(({ file }) => file);
  }
}
