export {
  TOKEN_COOKIE,
  createDashboard,
  isLoopbackHost,
  type DashboardHandler,
  type DashboardOptions,
} from './create-dashboard.js';
