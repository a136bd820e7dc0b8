// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', '.bench/**', 'node_modules/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/restrict-template-expressions': [
        'error',
        { allowNumber: true, allowBoolean: true },
      ],
      '@typescript-eslint/no-extraneous-class': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-invalid-void-type': 'off',
      '@typescript-eslint/no-unnecessary-type-parameters': 'off',
      'no-restricted-imports': 'off',
    },
  },
  {
    files: ['src/**/*.ts'],
    ignores: ['src/redis/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [
            { name: 'bullmq', message: 'Only src/redis may import bullmq (DESIGN.md layers).' },
            { name: 'ioredis', message: 'Only src/redis may import ioredis (DESIGN.md layers).' },
          ],
        },
      ],
    },
  },
  {
    // The CLI reaches Redis only through redis/ (DESIGN.md), and loads that layer lazily
    // (loadRedisLayer), so that its help and its errors work without bullmq and ioredis installed:
    // types only from the redis/ modules that import them.
    files: ['src/cli/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^\\.\\./redis/(?!load-redis-layer\\.js$|redis-errors\\.js$)',
              allowTypeImports: true,
              message:
                'The CLI takes Redis classes from loadRedisLayer(), so that --help works without bullmq and ioredis.',
            },
          ],
        },
      ],
    },
  },
  {
    files: [
      'src/messages/**/*.ts',
      'src/broker/**/*.ts',
      'src/log/**/*.ts',
      'src/handlers/**/*.ts',
      'src/dispatch/**/*.ts',
      'src/projections/**/*.ts',
      'src/dead-letters/**/*.ts',
    ],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [
            { name: 'bullmq', message: 'Only src/redis may import bullmq (DESIGN.md layers).' },
            { name: 'ioredis', message: 'Only src/redis may import ioredis (DESIGN.md layers).' },
            { name: 'inversify', message: 'Nothing below src/bus knows inversify (DESIGN.md layers).' },
          ],
        },
      ],
    },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts', 'examples/**/*.ts'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    files: ['**/*.js'],
    ...tseslint.configs.disableTypeChecked,
  },
);
