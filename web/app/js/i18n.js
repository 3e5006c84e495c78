// i18n: Korean by default, English on request; the choice is kept in
// localStorage. t(key, vars) fills {name} placeholders.
const table = {
  ko: {
    appTitle: 'DPCS 가족 데이터', skip: '본문으로 건너뛰기', switchLang: 'English', langName: '한국어',
    navDashboard: '대시보드', navUsage: '사용량', navInbox: '알림', navControls: '관리', navSettings: '설정', navMain: '주 메뉴',
    loginTitle: '로그인', loginId: '회원 번호 또는 휴대폰 번호', password: '비밀번호', loginBtn: '로그인',
    loginFailed: '로그인하지 못했습니다: {msg}', loggingIn: '로그인 중…', logout: '로그아웃',
    poolRemaining: '가족 데이터 남은 양', poolOf: '{total} 중 {remaining} 남음', usedPct: '{pct}% 사용',
    noPool: '데이터 풀이 없습니다: 모든 사용이 차단됩니다', topUps: '충전 {bytes} 포함',
    shareTitle: '구성원별 이번 달 사용 비율', members: '구성원', standing: '상태',
    allowed: '사용 가능', blocked: '차단됨', thisMonth: '이번 달 {bytes}', today: '오늘 {bytes}', owner: '보호자', member: '구성원',
    you: '나',
    'reason.ALLOWED': '사용 가능', 'reason.BLOCKED_ACCESS': '보호자가 사용을 막았습니다',
    'reason.BLOCKED_APP': '차단된 앱 또는 분류입니다', 'reason.BLOCKED_TIME': '차단 시간대({name})입니다',
    'reason.BLOCKED_LIMIT_DAILY': '하루 한도를 다 썼습니다', 'reason.BLOCKED_LIMIT_MONTHLY': '월 한도를 다 썼습니다',
    'reason.BLOCKED_FAMILY_QUOTA': '가족 데이터를 다 썼습니다', 'reason.BLOCKED_NOT_MEMBER': '가족 구성원이 아닙니다',
    'until.window': '{time}까지 (차단 시간대가 끝나면)', 'until.tomorrow': '내일 0시까지', 'until.nextMonth': '다음 달 1일까지',
    'until.owner': '보호자가 풀어줄 때까지', 'until.unknown': '알 수 없음', 'until.topup': '충전하거나 다음 달 1일까지',
    liveOn: '실시간', liveOff: '연결 끊김, 다시 연결 중…', offline: '오프라인: {time} 기준 마지막 정보입니다',
    updatedAt: '{time} 갱신',
    blockTitle: '지금은 데이터를 쓸 수 없어요', why: '이유', until: '언제까지', whoToAsk: '누구에게 부탁할까요',
    askMore: '데이터 더 달라고 하기', askAmount: '얼마나 필요해요?', askMessage: '메시지 (선택)', askSend: '부탁 보내기',
    askSent: '부탁을 보냈어요. 보호자의 답을 기다리는 중…', askFailed: '보내지 못했습니다: {msg}', askPending: '기다리는 부탁',
    askUnavailable: '이 서버는 아직 데이터 부탁을 받지 않습니다', backHome: '대시보드로',
    requestsTitle: '데이터 부탁', requestFrom: '{name}: {bytes}', approve: '승인', decline: '거절',
    grant: '승인 방식', 'grant.DAY': '오늘만 한도 올리기', 'grant.MONTH': '이번 달 한도 올리기', 'grant.TOPUP': '가족 데이터 충전',
    noRequests: '기다리는 부탁이 없습니다', approved: '승인했습니다', declined: '거절했습니다',
    usageTitle: '사용량 상세', whose: '누구의 사용량', byHour: '시간대별 (오늘)', byApp: '앱별 (이번 달)', byCategory: '분류별 (이번 달)',
    byDay: '일별 (이번 달)', events: '{n}건', noUsage: '아직 사용 기록이 없습니다', totalMonth: '이번 달 합계 {bytes}, 차단 {n}건',
    inboxTitle: '알림함', markRead: '읽음', markAllRead: '모두 읽음', unread: '읽지 않음', noNotes: '알림이 없습니다',
    loadMore: '더 보기', unreadCount: '읽지 않은 알림 {n}개',
    controlsTitle: '보호자 관리', memberPick: '구성원 선택', monthlyLimit: '월 한도', dailyLimit: '하루 한도', noLimit: '한도 없음',
    limitValue: '{bytes}', applied: '적용했습니다', conflict: '다른 보호자가 먼저 바꿨습니다. 새로 불러왔습니다.',
    blockNow: '지금 차단', unblockNow: '차단 풀기', accessTitle: '즉시 차단', accessOn: '차단 중', accessOff: '사용 허용',
    windowsTitle: '차단 시간대', windowName: '이름', windowStart: '시작', windowEnd: '끝', windowDays: '요일',
    everyDay: '매일', noDaysEveryDay: '고르지 않으면 매일', addWindow: '시간대 추가', remove: '삭제', crossesMidnight: '자정을 넘깁니다',
    defaultWindow: '기본', appsTitle: '앱 및 분류 차단', category: '분류', blockCategory: '{cat} 전체 차단', appsIn: '{cat} 앱 {n}개',
    thresholdsTitle: '알림 기준 (남은 %)', thresholdsHint: '쉼표로 구분, 예: 50,30,10 (비우면 끔)', save: '저장',
    membersTitle: '구성원 관리', addMember: '구성원 추가', name: '이름', role: '역할', add: '추가', removeConfirm: '{name}님을 가족에서 뺄까요?',
    topupTitle: '데이터 충전', topupBtn: '{bytes} 충전', toppedUp: '{bytes} 충전했습니다',
    settingsTitle: '설정', language: '언어', pushTitle: '푸시 알림', pushOn: '푸시 알림 켜기', pushOff: '푸시 알림 끄기',
    pushUnsupported: '이 브라우저는 푸시 알림을 지원하지 않습니다', pushEnabled: '푸시 알림을 켰습니다', pushDisabled: '푸시 알림을 껐습니다',
    pushFailed: '푸시 알림 설정 실패: {msg}', account: '계정', signedInAs: '{name} ({role}) · 가족 {family}',
    'cat.VIDEO': '동영상', 'cat.GAME': '게임', 'cat.SOCIAL': 'SNS', 'cat.MESSAGING': '메신저', 'cat.WEB': '웹', 'cat.MUSIC': '음악',
    'day.MON': '월', 'day.TUE': '화', 'day.WED': '수', 'day.THU': '목', 'day.FRI': '금', 'day.SAT': '토', 'day.SUN': '일',
    error: '오류: {msg}', loading: '불러오는 중…', bytesLabel: '바이트', ownersOnly: '보호자만 볼 수 있습니다',
    newNote: '새 알림: {title}',
  },
  en: {
    appTitle: 'DPCS Family Data', skip: 'Skip to content', switchLang: '한국어', langName: 'English',
    navDashboard: 'Dashboard', navUsage: 'Usage', navInbox: 'Inbox', navControls: 'Controls', navSettings: 'Settings', navMain: 'Main menu',
    loginTitle: 'Log in', loginId: 'Member number or phone', password: 'Password', loginBtn: 'Log in',
    loginFailed: 'Could not log in: {msg}', loggingIn: 'Logging in…', logout: 'Log out',
    poolRemaining: 'Family data left', poolOf: '{remaining} left of {total}', usedPct: '{pct}% used',
    noPool: 'No data pool: every use is blocked', topUps: 'including {bytes} of top-ups',
    shareTitle: "Each member's share this month", members: 'Members', standing: 'Standing',
    allowed: 'Allowed', blocked: 'Blocked', thisMonth: 'this month {bytes}', today: 'today {bytes}', owner: 'Owner', member: 'Member',
    you: 'you',
    'reason.ALLOWED': 'Allowed', 'reason.BLOCKED_ACCESS': 'An owner blocked data use',
    'reason.BLOCKED_APP': 'A blocked app or category', 'reason.BLOCKED_TIME': 'Blocked time window ({name})',
    'reason.BLOCKED_LIMIT_DAILY': 'Daily limit used up', 'reason.BLOCKED_LIMIT_MONTHLY': 'Monthly limit used up',
    'reason.BLOCKED_FAMILY_QUOTA': 'Family data used up', 'reason.BLOCKED_NOT_MEMBER': 'Not a member of the family',
    'until.window': 'until {time} (the end of the window)', 'until.tomorrow': 'until midnight', 'until.nextMonth': 'until the 1st of next month',
    'until.owner': 'until an owner unblocks you', 'until.unknown': 'unknown', 'until.topup': 'until a top-up or the 1st of next month',
    liveOn: 'Live', liveOff: 'Disconnected, reconnecting…', offline: 'Offline: last known data from {time}',
    updatedAt: 'updated {time}',
    blockTitle: "You can't use data right now", why: 'Why', until: 'Until when', whoToAsk: 'Who to ask',
    askMore: 'Ask for more data', askAmount: 'How much do you need?', askMessage: 'Message (optional)', askSend: 'Send request',
    askSent: 'Request sent. Waiting for an owner to answer…', askFailed: 'Could not send: {msg}', askPending: 'Pending requests',
    askUnavailable: 'This server does not take data requests yet', backHome: 'To the dashboard',
    requestsTitle: 'Data requests', requestFrom: '{name}: {bytes}', approve: 'Approve', decline: 'Decline',
    grant: 'Grant', 'grant.DAY': 'Raise the limit for today', 'grant.MONTH': 'Raise the limit this month', 'grant.TOPUP': 'Top up the family pool',
    noRequests: 'No pending requests', approved: 'Approved', declined: 'Declined',
    usageTitle: 'Usage detail', whose: 'Whose usage', byHour: 'By hour (today)', byApp: 'By app (this month)', byCategory: 'By category (this month)',
    byDay: 'By day (this month)', events: '{n} events', noUsage: 'No usage yet', totalMonth: 'This month {bytes}, {n} blocked',
    inboxTitle: 'Inbox', markRead: 'Mark read', markAllRead: 'Mark all read', unread: 'Unread', noNotes: 'No notifications',
    loadMore: 'Load more', unreadCount: '{n} unread',
    controlsTitle: 'Owner controls', memberPick: 'Member', monthlyLimit: 'Monthly limit', dailyLimit: 'Daily limit', noLimit: 'No limit',
    limitValue: '{bytes}', applied: 'Applied', conflict: 'Another owner changed it first. Reloaded.',
    blockNow: 'Block now', unblockNow: 'Unblock', accessTitle: 'Instant block', accessOn: 'Blocked', accessOff: 'Allowed',
    windowsTitle: 'Blocked time windows', windowName: 'Name', windowStart: 'Start', windowEnd: 'End', windowDays: 'Days',
    everyDay: 'Every day', noDaysEveryDay: 'none chosen: every day', addWindow: 'Add window', remove: 'Remove', crossesMidnight: 'crosses midnight',
    defaultWindow: 'default', appsTitle: 'App and category blocks', category: 'Category', blockCategory: 'Block all {cat}', appsIn: '{n} {cat} apps',
    thresholdsTitle: 'Alert thresholds (% left)', thresholdsHint: 'Comma separated, e.g. 50,30,10 (empty turns alerts off)', save: 'Save',
    membersTitle: 'Members', addMember: 'Add a member', name: 'Name', role: 'Role', add: 'Add', removeConfirm: 'Remove {name} from the family?',
    topupTitle: 'Top up', topupBtn: 'Add {bytes}', toppedUp: 'Added {bytes}',
    settingsTitle: 'Settings', language: 'Language', pushTitle: 'Push notifications', pushOn: 'Turn on push', pushOff: 'Turn off push',
    pushUnsupported: 'This browser does not support push notifications', pushEnabled: 'Push notifications on', pushDisabled: 'Push notifications off',
    pushFailed: 'Push setup failed: {msg}', account: 'Account', signedInAs: '{name} ({role}) · family {family}',
    'cat.VIDEO': 'Video', 'cat.GAME': 'Games', 'cat.SOCIAL': 'Social', 'cat.MESSAGING': 'Messaging', 'cat.WEB': 'Web', 'cat.MUSIC': 'Music',
    'day.MON': 'Mon', 'day.TUE': 'Tue', 'day.WED': 'Wed', 'day.THU': 'Thu', 'day.FRI': 'Fri', 'day.SAT': 'Sat', 'day.SUN': 'Sun',
    error: 'Error: {msg}', loading: 'Loading…', bytesLabel: 'bytes', ownersOnly: 'Owners only',
    newNote: 'New: {title}',
  },
};

const KEY = 'dpcs.lang';
export let lang = localStorage.getItem(KEY) === 'en' ? 'en' : 'ko';

export function setLang(l) {
  lang = l === 'en' ? 'en' : 'ko';
  localStorage.setItem(KEY, lang);
  document.documentElement.lang = lang;
}

export function t(key, vars) {
  let s = table[lang][key] ?? table.ko[key] ?? key;
  if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m));
  return s;
}

export function locale() { return lang === 'en' ? 'en-US' : 'ko-KR'; }
