export {
  TOKEN_COOKIE,
  createDashboard,
  isLoopbackHost,
  type DashboardHandler,
  type DashboardOptions,
} from './create-dashboard.js';
export type {
  DashboardEndpoint,
  DashboardJobCounts,
  DashboardProjectionLag,
  DashboardQueueDepth,
  DashboardSubscription,
  DashboardTopology,
} from './dashboard-insight-pages.js';
