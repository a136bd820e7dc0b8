export {
  MIN_TOKEN_LENGTH,
  TOKEN_COOKIE,
  createDashboard,
  isLoopbackHost,
  type DashboardHandler,
  type DashboardOptions,
} from './create-dashboard.js';
export { CSRF_COOKIE, CSRF_FIELD } from './dashboard-csrf.js';
export { TOKEN_GUESSES_PER_SECOND } from './token-guess-limit.js';
export type { DashboardReplay } from './replay-jobs.js';
