// The drift dashboard page served at GET /dashboard (rollout_service.h): self-contained HTML,
// CSS and JavaScript, no external resources. It polls /dashboard/data every 2 s and draws, per
// serving batch over time, τ (coloured by drafter version) and generated tokens/s, with dashed
// markers where the policy version (red) or the drafter version (blue) changed, plus a table of
// mean τ and tokens/s per (policy, drafter) version. With an API key: /dashboard#key=KEY.
#pragma once

namespace updraft {

const char* dashboard_html();

}  // namespace updraft
