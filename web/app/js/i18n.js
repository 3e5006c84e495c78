// i18n: Korean by default, English on request; the choice is kept in
// localStorage. t(key, vars) fills {name} placeholders.
const table = {
  ko: {
    appTitle: 'DPCS 가족 데이터', skip: '본문으로 건너뛰기', switchLang: 'English', langName: '한국어',
    navDashboard: '대시보드', navUsage: '사용량', navInbox: '알림', navControls: '관리', navSettings: '설정', navMain: '주 메뉴',
    loginTitle: '로그인', loginId: '회원 번호 또는 휴대폰 번호', password: '비밀번호', loginBtn: '로그인',
    loginFailed: '로그인하지 못했습니다: {msg}', loggingIn: '로그인 중…', logout: '로그아웃',
    poolRemaining: '가족 데이터 남은 양', poolOf: '{total} 중 {remaining} 남음', usedPct: '{pct}% 사용',
    poolReserved: '지금 연결된 휴대폰들이 {bytes}를 미리 받아 두었어요. 다 쓰면 사용량에 더해지고, 남으면 돌아와요.',
    memberReserved: '지금 연결에서 {bytes}를 미리 받아 두었어요 (아직 쓰지 않음)',
    noPool: '데이터 풀이 없습니다: 모든 사용이 차단됩니다', topUps: '충전 {bytes} 포함',
    shareTitle: '구성원별 이번 달 사용 비율', members: '구성원', standing: '상태',
    allowed: '사용 가능', blocked: '차단됨', thisMonth: '이번 달 {bytes}', today: '오늘 {bytes}', owner: '보호자', member: '구성원',
    you: '나', myRules: '나에게 걸린 제한', noRules: '걸린 제한이 없어요', ruleWindow: '차단 시간대 {name}: {from}–{to} ({days})',
    ruleCategories: '막힌 분류: {list}', ruleApps: '막힌 앱: {list}', leftToday: '오늘 {left} 남음 / {limit}', leftMonth: '이번 달 {left} 남음 / {limit}', leftTodayOnly: '오늘 {left} 남음', todayExtra: '오늘만 {bytes} 더 허락됨',
    'reason.ALLOWED': '사용 가능', 'reason.BLOCKED_ACCESS': '보호자가 사용을 막았습니다',
    'reason.BLOCKED_APP': '차단된 앱 또는 분류입니다', 'reason.BLOCKED_APP_LIMIT': '앱의 하루 데이터를 다 썼습니다', 'reason.BLOCKED_TIME': '차단 시간대({name})입니다',
    'reason.BLOCKED_LIMIT_DAILY': '하루 한도를 다 썼습니다', 'reason.BLOCKED_LIMIT_MONTHLY': '월 한도를 다 썼습니다',
    'reason.BLOCKED_FAMILY_QUOTA': '가족 데이터를 다 썼습니다', 'reason.BLOCKED_NOT_MEMBER': '가족 구성원이 아닙니다',
    'until.window': '{time}까지 (차단 시간대가 끝나면)', 'until.tomorrow': '내일 0시까지', 'until.nextMonth': '다음 달 1일까지',
    'until.owner': '보호자가 풀어줄 때까지', 'until.unknown': '알 수 없음', 'until.topup': '충전하거나 다음 달 1일까지',
    liveOn: '실시간', liveOff: '다시 연결 중…', offline: '오프라인 · {time}', offlineLong: '오프라인: {time} 기준 마지막 정보입니다',
    updatedAt: '{time} 갱신',
    blockTitle: '지금은 데이터를 쓸 수 없어요', why: '이유', until: '언제까지', whoToAsk: '누구에게 부탁할까요',
    timeAskTitle: '쉬는 시간에 조금 더 쓰기', timeAskMinutes: '얼마나 더 필요해요?', minutes: '{n}분', timeAskSend: '보호자에게 부탁하기',
    timeApproved: '보호자가 허락했어요: {time}까지 쓸 수 있어요.', timeNotHelp: '보호자가 막은 차단은 시간을 더 받아도 풀리지 않아요. 보호자에게 직접 이야기해 주세요.',
    askAppMore: '30분 더 부탁', askAppSent: '{app} 30분 부탁을 보냈어요', reqData: '데이터 {bytes}', reqTime: '쉬는 시간에 {n}분 더', reqApp: '{app} {n}분 더',
    exceptionTime: '쉬는 시간 잠시 해제: {time}까지', exceptionApp: '{app} 잠시 허용: {time}까지', exceptionsTitle: '지금 허락된 예외',
    grantTimeNow: '지금 30분 더 허락', endException: '끝내기', allowAppNow: '30분 허락',
    budgetsTitle: '앱별 하루 데이터', budgetsHint: '정한 만큼 쓰면 그날은 그 앱만 멈춰요. 다른 앱은 계속 쓸 수 있어요.',
    budgetsNone: '정한 앱이 없어요', budgetRow: '{app} 하루 {amount}', budgetApp: '앱', budgetAmount: '하루에', budgetSet: '정하기',
    appBudgetUsedUp: '{app} 하루 {amount} 다 썼어요', appBudgetLeft: '{app}은(는) 하루 {amount}까지 쓸 수 있어요',
    appWhyBudget: '보호자가 하루 {amount}까지로 정해 두었어요 (오늘 {used} 썼어요)',
    appWhyCatBudget: '보호자가 {cat} 앱을 하루 {amount}까지로 정해 두었어요 (오늘 {used} 썼어요)', appBudgetUntil: '내일 0시에 다시 쓸 수 있어요',
    myBudget: '{app} 하루 {amount}',
    appBlockTitle: '{app}: 지금은 쓸 수 없어요', appAllowedNow: '{app}: {time}까지 쓸 수 있어요', appNotBlocked: '{app}: 막혀 있지 않아요',
    appWhyApp: '보호자가 이 앱을 막아 두었어요', appWhyCategory: '보호자가 {cat} 앱을 모두 막아 두었어요', appUntil: '{time}까지 허락받았어요',
    appOthersWork: '다른 앱은 그대로 쓸 수 있어요.', appAskTitle: '{app} 조금 더 쓰게 해 달라고 부탁하기', appAskSend: '보호자에게 부탁하기',
    thresholdMember: '가족 데이터가 {pct}% 미만 남았습니다. 더 필요하면 보호자에게 부탁하세요.', poolLow: '가족 데이터가 {pct}% 미만 남았어요.', topupNow: '충전하기',
    weekCaption: '{from}부터 {to}까지 구성원별 사용량', weekUsed: '쓴 양', weekBlocked: '차단',
    unknownApp: '알 수 없는 앱', stillWorks: '쉬는 시간에도 쓸 수 있는 것: {list}', stillWorksNone: '쉬는 시간에는 모든 앱이 막혀요. 급한 일은 보호자에게 전화하세요.',
    alwaysAllowedTitle: '쉬는 시간에도 쓸 수 있는 분류', alwaysAllowedHelp: '차단 시간대에도 이 분류의 앱은 쓸 수 있어요 (예: 메신저로 연락, 지도).',
    allowCategory: '{cat} 허용', ruleAllowed: '쉬는 시간에도 쓸 수 있어요: {list}', nextDowntime: '다음 차단 시간대: {name} {time}부터',
    priceWon: '{price}원', free: '무료', topupConfirm: '{bytes}를 {price}원(부가세 포함)에 충전할까요? 휴대폰 요금에 합산되고 가족 데이터에 바로 더해집니다.', topupYes: '충전하기',
    toppedUpPaid: '{bytes} 충전했습니다 ({price}원, 휴대폰 요금에 합산)', noOffers: '통신사가 정한 충전 상품이 없습니다',
    giftTitle: '데이터 선물하기', giftFrom: '보내는 사람', giftTo: '받는 사람', giftAmount: '얼마나', giftSend: '선물하기',
    giftLeft: '이번 달 남은 양: {bytes}', giftConfirm: '{to}님에게 데이터 {bytes}를 선물할까요? 이번 달 내 한도에서 빠집니다.', giftConfirmFrom: '{from}님의 데이터 {bytes}를 {to}님에게 선물할까요? {from}님의 이번 달 한도에서 빠집니다.', giftYes: '선물하기',
    giftDone: '{to}님에게 {bytes}를 선물했어요. 남은 양: {left}',
    askMore: '데이터 더 달라고 하기', askAmount: '얼마나 필요해요?', askMessage: '메시지 (선택)', askSend: '부탁 보내기',
    askSent: '부탁을 보냈어요. 보호자의 답을 기다리는 중…', askFailed: '보내지 못했습니다: {msg}', askPending: '기다리는 부탁',
    askUnavailable: '이 서버는 아직 데이터 부탁을 받지 않습니다',
    askNotData: '이 차단은 데이터를 더 받아도 풀리지 않아요. 보호자에게 직접 이야기해 주세요.',
    askApproved: '보호자가 승인했어요: {bytes}', askDeclined: '보호자가 거절했어요.', backHome: '대시보드로',
    requestsTitle: '부탁', requestFrom: '{name}: {bytes}', approve: '승인', decline: '거절',
    grant: '승인 방식', 'grant.DAY': '오늘만 한도 올리기', 'grant.MONTH': '이번 달 한도 올리기', 'grant.TOPUP': '가족 데이터 충전',
    noRequests: '기다리는 부탁이 없습니다', requestAnswered: '이미 답한 부탁입니다', approved: '승인했습니다', declined: '거절했습니다',
    usageTitle: '사용량 상세', whose: '누구의 사용량', byHour: '시간대별 (오늘)', byApp: '앱별 (이번 달)', byCategory: '분류별 (이번 달)',
    byDay: '일별 (이번 달)', events: '{n}건', noUsage: '아직 사용 기록이 없습니다', totalMonth: '이번 달 합계 {bytes}, 차단 {n}건',
    inboxTitle: '알림함', markRead: '읽음', markAllRead: '모두 읽음', unread: '읽지 않음', noNotes: '알림이 없습니다',
    loadMore: '더 보기', unreadCount: '읽지 않은 알림 {n}개',
    controlsTitle: '보호자 관리', memberPick: '구성원 선택', monthlyLimit: '월 한도', dailyLimit: '하루 한도', noLimit: '한도 없음',
    limitValue: '{bytes}', applied: '적용했습니다', cancel: '취소', amount: '양', unit: '단위', setAmount: '적용',
    limitPick: '양을 정하면 적용됩니다', amountInvalid: '0 이상의 숫자로 적어 주세요.',
    clearLimit: '한도 없애기', limitMax: '한도는 {max}까지 정할 수 있어요. 적은 값은 그대로 두었어요.', applyAnyway: '그래도 적용',
    confirmBelowUse: '{name}님은 이미 {used}를 써서 {limit}를 {bytes}로 하면 바로 막혀요. 그래도 적용할까요?',
    confirmZero: '{limit}를 0으로 하면 {name}님은 데이터를 전혀 쓸 수 없어요. 그래도 적용할까요?', setZero: '0으로 적용',
    confirmBlock: '{name}님의 데이터를 지금 막을까요? 풀어 줄 때까지 쓸 수 없어요.',
    revokeExtra: '취소', extraLine: '{when} 추가 허용 {bytes}', conflict: '다른 보호자가 먼저 바꿨습니다. 새로 불러왔습니다.',
    blockNow: '지금 차단', unblockNow: '차단 풀기', accessTitle: '즉시 차단', accessOn: '차단 중', accessOff: '사용 허용',
    windowsTitle: '차단 시간대', windowName: '이름', windowStart: '시작', windowEnd: '끝', windowDays: '요일',
    everyDay: '매일', noDaysEveryDay: '고르지 않으면 매일', addWindow: '시간대 추가', remove: '삭제', crossesMidnight: '자정을 넘깁니다',
    windowPresets: '자주 쓰는 시간대', 'preset.school': '수업 시간 (평일 9–15시)', 'preset.school.name': '수업',
    'preset.schoolNight': '학교 가기 전날 밤 (22–7시)', 'preset.schoolNight.name': '평일밤',
    'preset.weekendNight': '주말 밤 (23:30–8시)', 'preset.weekendNight.name': '주말밤',
    defaultWindow: '기본', windowDefaultName: '밤', appsTitle: '앱 및 분류 차단', category: '분류', blockCategory: '{cat} 전체 차단', appsIn: '{cat} 앱 {n}개',
    thresholdsTitle: '알림 기준 (남은 %)', thresholdsHint: '쉼표로 구분, 예: 50,30,10 (비우면 끔)', save: '저장',
    membersTitle: '구성원 관리', addMember: '구성원 추가', name: '이름', role: '역할', add: '추가', removeConfirm: '{name}님을 가족에서 뺄까요?',
    memberAdded: '{name}님을 추가했어요. 로그인 번호는 {id}, 비밀번호는 방금 정한 것이에요.', memberAddedNoPassword: '{name}님을 추가했어요. 로그인 번호는 {id}예요. 비밀번호를 정하지 않아 아직 로그인할 수 없어요: 관리에서 {name}님을 골라 비밀번호를 정해 주세요.',
    memberRemoved: '{name}님을 가족에서 뺐어요.', newPasswordHint: '정해 주면 새 구성원이 로그인 번호와 이 비밀번호로 로그인해요.',
    topupTitle: '데이터 충전', topupBtn: '{bytes} 충전', toppedUp: '{bytes} 충전했습니다',
    // Top-ups bought from the operator's offers, receipts, the 충전/선물 history, gift rules, minors (#39).
    seeReceipt: '영수증 보기', historyLink: '충전/선물 내역', historyTitle: '충전/선물 내역', historyMonth: '달', historyWho: '누구',
    historyEveryone: '가족 전체', historyEmpty: '이 달에는 충전이나 선물이 없어요', histTopup: '{bytes} 충전', histTopupFree: '{bytes} 충전 (고객센터, 무료)',
    histGift: '{from} → {to} {bytes} 선물', histPrice: '{price}원', histBy: '{name}님이', historyTotals: '충전 {bytes} · {price}원 · 선물 {gifts}',
    historyTotalsMember: '충전 {bytes} · 선물 {gifts}', receiptTitle: '영수증', receiptOffer: '상품', receiptSupply: '공급가액', receiptVat: '부가세 ({rate}%)',
    receiptTotal: '합계', receiptBilling: '결제', 'billing.PHONE_BILL': '휴대폰 요금에 합산', 'billing.FREE': '무료 (고객센터 충전)',
    receiptBuyer: '구매한 사람', receiptAt: '일시', receiptFamily: '가족', receiptMonth: '적용 달', receiptBack: '내역으로', receiptMonthValue: '{y}년 {m}월',
    topupVat: '부가세 {vat}원 포함', giftCanGive: '선물할 수 있는 양: {bytes}', giftRulesHint: '{step} 단위로 한 번에 {max}까지 · 보내고 나서 {floor}는 남겨야 해요',
    giftTimesLeft: '이번 달 {n}번 더 보낼 수 있어요', giftMinorNote: '미성년자는 데이터 선물을 받을 수만 있어요.', giftNoneLeft: '이번 달에는 더 보낼 수 있는 양이 없어요',
    'giftRule.LEFT': '이번 달 남은 양이 모자라요. {limit}까지 보낼 수 있어요.',
    'giftRule.FLOOR': '보내고 나서 이번 달 데이터를 조금은 남겨야 해요. {limit}까지 보낼 수 있어요.',
    'giftRule.SHARE': '한 달에 월 한도의 {pct}%까지만 선물할 수 있어요. 이번 달에는 {limit} 더 보낼 수 있어요.',
    'giftRule.STEP': '선물은 {limit} 단위로 보낼 수 있어요.', 'giftRule.MAX': '한 번에 {limit}까지 선물할 수 있어요.',
    'giftRule.GIVEN_PER_MONTH': '이번 달에는 선물을 {limit}번 모두 보냈어요. 다음 달 1일부터 다시 보낼 수 있어요.',
    'giftRule.RECEIVED_PER_MONTH': '받는 사람이 이번 달 선물을 {limit}번 모두 받았어요.',
    'giftRule.RECEIVED_MAX': '받는 사람은 이번 달 {limit}만 더 받을 수 있어요.',
    'giftRule.MINOR': '미성년자는 선물을 보낼 수 없고 받을 수만 있어요.',
    'giftRule.GIVER_NO_LIMIT': '월 한도가 없는 구성원은 선물할 데이터가 따로 없어요. 먼저 월 한도를 정해 주세요.',
    'giftRule.RECEIVER_NO_LIMIT': '받는 사람에게 월 한도가 없어 선물이 필요 없어요 (가족 데이터를 그대로 쓸 수 있어요).',
    minorLabel: '미성년자 (선물은 받기만)', 'grant.TOPUP.offer': '가족 데이터 충전 ({bytes}, {price}원)',
    alwaysAllowedApps: '쉬는 시간에도 쓸 수 있는 앱', alwaysAllowedAppsHelp: '차단 시간대에도 고른 앱은 쓸 수 있어요 (예: 학교 앱, 지도).',
    'field.offerId': '충전 상품', 'err.offer': '통신사의 충전 상품 중에서 골라 주세요.',
    settingsTitle: '설정', language: '언어', pushTitle: '푸시 알림', pushOn: '푸시 알림 켜기', pushOff: '푸시 알림 끄기',
    pushUnsupported: '이 브라우저는 푸시 알림을 지원하지 않습니다', pushEnabled: '푸시 알림을 켰습니다', pushDisabled: '푸시 알림을 껐습니다',
    pushFailed: '푸시 알림 설정 실패: {msg}', account: '계정', signedInAs: '{name} ({role}) · 가족 {family}',
    'cat.VIDEO': '동영상', 'cat.GAME': '게임', 'cat.SOCIAL': 'SNS', 'cat.MESSAGING': '메신저', 'cat.WEB': '웹', 'cat.MUSIC': '음악', 'cat.OTHER': '기타',
    'day.MON': '월', 'day.TUE': '화', 'day.WED': '수', 'day.THU': '목', 'day.FRI': '금', 'day.SAT': '토', 'day.SUN': '일',
    error: '오류: {msg}', loading: '불러오는 중…', retrying: '연결되면 이 화면을 자동으로 다시 불러옵니다.',
    'err.network': '서버에 연결할 수 없습니다. 인터넷 연결을 확인하고 잠시 뒤에 다시 해 보세요.',
    'err.session': '로그인이 끝났습니다. 다시 로그인해 주세요.', 'err.forbidden': '이 일은 보호자만 할 수 있습니다.',
    'err.notFound': '찾을 수 없습니다. 이미 지워졌을 수 있어요.', 'err.conflict': '다른 보호자가 먼저 바꿨습니다. 새로 불러와서 다시 해 주세요.',
    'err.tooLarge': '보내는 내용이 너무 큽니다.', 'err.tooMany': '너무 자주 요청했습니다. {wait} 뒤에 다시 해 보세요.',
    'err.unavailable': '지금은 처리할 수 없습니다. 잠시 뒤에 다시 해 보세요.', 'err.server': '서버에 문제가 생겼습니다. 잠시 뒤에 다시 해 보세요.',
    'err.seconds': '{n}초', 'err.minutes': '{n}분', 'err.thresholds': '알림 기준은 1에서 99 사이의 숫자로, 쉼표로 나눠 적어 주세요.',
    'err.max': '{field}은(는) {max}까지 쓸 수 있습니다.', 'err.min': '{field}은(는) {min} 이상이어야 합니다.',
    'err.long': '{field}은(는) {n}자까지 쓸 수 있습니다.', 'err.required': '{field}을(를) 입력해 주세요.',
    'err.chars': '{field}에 쓸 수 없는 글자가 있습니다.', 'err.invalid': '{field}을(를) 다시 확인해 주세요.',
    'field.bytes': '데이터 양', 'field.amountBytes': '데이터 양', 'field.name': '이름', 'field.message': '메시지', 'field.reason': '사유',
    'field.thresholds': '알림 기준', 'field.start': '시작 시간', 'field.end': '끝 시간', 'field.days': '요일', 'field.role': '역할',
    'field.phone': '휴대폰 번호', 'field.value': '입력한 값', bytesLabel: '바이트', ownersOnly: '보호자만 볼 수 있습니다',
    newNote: '새 알림: {title}',
    loginBad: '회원 번호나 비밀번호가 맞지 않습니다. {n}번 더 틀리면 로그인이 잠깁니다.',
    loginNowLocked: '여러 번 틀려서 로그인이 {min}분 동안 잠겼습니다.', loginLocked: '로그인이 잠겨 있습니다. {min}분 뒤에 다시 해 보세요.',
    lockedHelp: '비밀번호가 생각나지 않으면 보호자에게 재설정을 부탁하세요: 보호자가 관리 화면에서 바로 바꿔 줄 수 있어요 (보호자의 비밀번호는 고객센터에서).',
    'ended.EXPIRED': '오래 쓰지 않아 로그인이 끝났어요. 다시 로그인해 주세요.',
    'ended.PASSWORD': '비밀번호가 바뀌어 로그인이 끝났어요. 새 비밀번호로 로그인해 주세요. 모르면 보호자에게 물어보세요.',
    'ended.REMOVED': '가족 구성원에서 빠져 로그인이 끝났어요.',
    'ended.REVOKED': '다른 곳에서 로그아웃되어 로그인이 끝났어요. 다시 로그인해 주세요.',
    'ended.SESSION': '로그인이 끝났어요. 다시 로그인해 주세요.',
    pwTitle: '비밀번호 바꾸기', pwCurrent: '지금 비밀번호', pwNew: '새 비밀번호', pwAgain: '새 비밀번호 확인', pwChange: '비밀번호 바꾸기',
    pwHint: '8자 이상. 흔한 비밀번호와 회원 번호·휴대폰 번호·이름은 쓸 수 없습니다. 서로 관계없는 단어 몇 개를 이어 쓰면 좋아요.',
    pwChanged: '비밀번호를 바꿨습니다. 다른 기기에서는 로그아웃됩니다.', pwMismatch: '새 비밀번호 두 개가 서로 다릅니다.',
    pwWeak: '지금 비밀번호는 너무 쉽습니다. 새 비밀번호로 바꿔 주세요.',
    'pw.short': '8자 이상이어야 합니다.', 'pw.long': '너무 깁니다 (영문 72자, 한글 24자까지).',
    'pw.common': '너무 흔하거나 짐작하기 쉬운 비밀번호입니다. 다른 것을 골라 주세요.',
    'pw.context': '회원 번호, 휴대폰 번호, 이름은 비밀번호로 쓸 수 없습니다.', 'pw.wrongCurrent': '지금 비밀번호가 맞지 않습니다.',
    'pw.locked': '여러 번 틀려서 잠시 잠겼습니다. {min}분 뒤에 다시 해 보세요.',
    resetTitle: '비밀번호 재설정', resetFor: '{name}님의 새 비밀번호', resetBtn: '재설정',
    resetDone: '{name}님의 비밀번호를 바꿨습니다. {name}님은 모든 기기에서 로그아웃됩니다.',
  },
  en: {
    appTitle: 'DPCS Family Data', skip: 'Skip to content', switchLang: '한국어', langName: 'English',
    navDashboard: 'Dashboard', navUsage: 'Usage', navInbox: 'Inbox', navControls: 'Controls', navSettings: 'Settings', navMain: 'Main menu',
    loginTitle: 'Log in', loginId: 'Member number or phone', password: 'Password', loginBtn: 'Log in',
    loginFailed: 'Could not log in: {msg}', loggingIn: 'Logging in…', logout: 'Log out',
    poolRemaining: 'Family data left', poolOf: '{remaining} left of {total}', usedPct: '{pct}% used',
    poolReserved: 'Phones connected now hold {bytes} in advance. What they use is added to the usage; the rest comes back.',
    memberReserved: 'Holds {bytes} in advance on its connection now (not used yet)',
    noPool: 'No data pool: every use is blocked', topUps: 'including {bytes} of top-ups',
    shareTitle: "Each member's share this month", members: 'Members', standing: 'Standing',
    allowed: 'Allowed', blocked: 'Blocked', thisMonth: 'this month {bytes}', today: 'today {bytes}', owner: 'Owner', member: 'Member',
    you: 'you', myRules: 'My restrictions', noRules: 'Nothing is restricted', ruleWindow: 'Downtime {name}: {from}–{to} ({days})',
    ruleCategories: 'Blocked categories: {list}', ruleApps: 'Blocked apps: {list}', leftToday: 'Today {left} left of {limit}', leftMonth: 'This month {left} left of {limit}', leftTodayOnly: 'Today {left} left', todayExtra: '{bytes} more allowed today only',
    'reason.ALLOWED': 'Allowed', 'reason.BLOCKED_ACCESS': 'An owner blocked data use',
    'reason.BLOCKED_APP': 'A blocked app or category', 'reason.BLOCKED_APP_LIMIT': "An app's daily data used up", 'reason.BLOCKED_TIME': 'Blocked time window ({name})',
    'reason.BLOCKED_LIMIT_DAILY': 'Daily limit used up', 'reason.BLOCKED_LIMIT_MONTHLY': 'Monthly limit used up',
    'reason.BLOCKED_FAMILY_QUOTA': 'Family data used up', 'reason.BLOCKED_NOT_MEMBER': 'Not a member of the family',
    'until.window': 'until {time} (the end of the window)', 'until.tomorrow': 'until midnight', 'until.nextMonth': 'until the 1st of next month',
    'until.owner': 'until an owner unblocks you', 'until.unknown': 'unknown', 'until.topup': 'until a top-up or the 1st of next month',
    liveOn: 'Live', liveOff: 'Reconnecting…', offline: 'Offline · {time}', offlineLong: 'Offline: last known data from {time}',
    updatedAt: 'updated {time}',
    blockTitle: "You can't use data right now", why: 'Why', until: 'Until when', whoToAsk: 'Who to ask',
    timeAskTitle: 'A little more time during downtime', timeAskMinutes: 'How much longer?', minutes: '{n} min', timeAskSend: 'Ask a parent',
    timeApproved: 'A parent said yes: you can use it until {time}.', timeNotHelp: 'More time does not lift a block a parent set. Talk to a parent.',
    askAppMore: 'Ask for 30 min', askAppSent: 'Asked for 30 more minutes of {app}', reqData: '{bytes} of data', reqTime: '{n} more min during downtime', reqApp: '{n} more min of {app}',
    exceptionTime: 'Downtime paused until {time}', exceptionApp: '{app} allowed until {time}', exceptionsTitle: 'Exceptions now',
    grantTimeNow: 'Allow 30 more minutes now', endException: 'End', allowAppNow: 'Allow 30 min',
    budgetsTitle: 'Daily data per app', budgetsHint: 'Once used up, only that app stops for the day. Other apps keep working.',
    budgetsNone: 'No app has one', budgetRow: '{app}: {amount} a day', budgetApp: 'App', budgetAmount: 'A day', budgetSet: 'Set',
    appBudgetUsedUp: "{app}: today's {amount} is used up", appBudgetLeft: '{app}: up to {amount} a day',
    appWhyBudget: 'A parent set {amount} a day ({used} used today)',
    appWhyCatBudget: 'A parent set {amount} a day for {cat} apps ({used} used today)', appBudgetUntil: 'again tomorrow at midnight',
    myBudget: '{app}: {amount} a day',
    appBlockTitle: "{app}: you can't use it now", appAllowedNow: '{app}: you can use it until {time}', appNotBlocked: '{app} is not blocked',
    appWhyApp: 'A parent blocked this app', appWhyCategory: 'A parent blocked all {cat} apps', appUntil: 'allowed until {time}',
    appOthersWork: 'Your other apps still work.', appAskTitle: 'Ask for a little more {app}', appAskSend: 'Ask a parent',
    thresholdMember: 'Less than {pct}% of the family data is left. Ask a parent if you need more.', poolLow: 'Less than {pct}% of the family data is left.', topupNow: 'Top up',
    weekCaption: 'Use per member, {from} to {to}', weekUsed: 'Used', weekBlocked: 'Blocked',
    unknownApp: 'an unknown app', stillWorks: 'Still works during downtime: {list}', stillWorksNone: 'Every app is blocked during downtime. Call a parent if it is urgent.',
    alwaysAllowedTitle: 'Allowed during downtime', alwaysAllowedHelp: 'Apps of these categories still work during downtime (e.g. messaging, maps).',
    allowCategory: 'Allow {cat}', ruleAllowed: 'Allowed during downtime: {list}', nextDowntime: 'Next downtime: {name} from {time}',
    priceWon: '₩{price}', free: 'free', topupConfirm: 'Add {bytes} for ₩{price} (VAT included)? It is billed with the phone bill and added to the family data at once.', topupYes: 'Top up',
    toppedUpPaid: 'Added {bytes} (₩{price}, billed with the phone bill)', noOffers: 'Your carrier offers no top-ups',
    giftTitle: 'Give data', giftFrom: 'From', giftTo: 'To', giftAmount: 'How much', giftSend: 'Give',
    giftLeft: 'Left this month: {bytes}', giftConfirm: 'Give {bytes} of data to {to}? It comes out of this month\'s limit.', giftConfirmFrom: 'Give {bytes} of {from}\'s data to {to}? It comes out of {from}\'s limit this month.', giftYes: 'Give',
    giftDone: 'Gave {bytes} to {to}. Left: {left}',
    askMore: 'Ask for more data', askAmount: 'How much do you need?', askMessage: 'Message (optional)', askSend: 'Send request',
    askSent: 'Request sent. Waiting for an owner to answer…', askFailed: 'Could not send: {msg}', askPending: 'Pending requests',
    askUnavailable: 'This server does not take data requests yet', backHome: 'To the dashboard',
    askNotData: 'More data does not lift this block. Talk to a parent.',
    askApproved: 'A parent approved: {bytes}', askDeclined: 'A parent declined.',
    requestsTitle: 'Requests', requestFrom: '{name}: {bytes}', approve: 'Approve', decline: 'Decline',
    grant: 'Grant', 'grant.DAY': 'Raise the limit for today', 'grant.MONTH': 'Raise the limit this month', 'grant.TOPUP': 'Top up the family pool',
    noRequests: 'No pending requests', requestAnswered: 'Already answered', approved: 'Approved', declined: 'Declined',
    usageTitle: 'Usage detail', whose: 'Whose usage', byHour: 'By hour (today)', byApp: 'By app (this month)', byCategory: 'By category (this month)',
    byDay: 'By day (this month)', events: '{n} events', noUsage: 'No usage yet', totalMonth: 'This month {bytes}, {n} blocked',
    inboxTitle: 'Inbox', markRead: 'Mark read', markAllRead: 'Mark all read', unread: 'Unread', noNotes: 'No notifications',
    loadMore: 'Load more', unreadCount: '{n} unread',
    controlsTitle: 'Owner controls', memberPick: 'Member', monthlyLimit: 'Monthly limit', dailyLimit: 'Daily limit', noLimit: 'No limit',
    limitValue: '{bytes}', applied: 'Applied', cancel: 'Cancel', amount: 'amount', unit: 'unit', setAmount: 'Set',
    limitPick: 'Choose an amount to apply it', amountInvalid: 'Write a number, 0 or more.',
    clearLimit: 'Remove the limit', limitMax: 'A limit can be at most {max}. What you typed is kept.', applyAnyway: 'Apply anyway',
    confirmBelowUse: '{name} already used {used}: a {limit} of {bytes} blocks at once. Apply it anyway?',
    confirmZero: 'A {limit} of 0 leaves {name} no data at all. Apply it anyway?', setZero: 'Set to 0',
    confirmBlock: "Block {name}'s data now? It stays blocked until you unblock it.",
    revokeExtra: 'Revoke', extraLine: '{when} extra {bytes}', conflict: 'Another owner changed it first. Reloaded.',
    blockNow: 'Block now', unblockNow: 'Unblock', accessTitle: 'Instant block', accessOn: 'Blocked', accessOff: 'Allowed',
    windowsTitle: 'Blocked time windows', windowName: 'Name', windowStart: 'Start', windowEnd: 'End', windowDays: 'Days',
    everyDay: 'Every day', noDaysEveryDay: 'none chosen: every day', addWindow: 'Add window', remove: 'Remove', crossesMidnight: 'crosses midnight',
    windowPresets: 'Common windows', 'preset.school': 'School hours (weekdays 9–15)', 'preset.school.name': 'school',
    'preset.schoolNight': 'School nights (22–7)', 'preset.schoolNight.name': 'schoolnight',
    'preset.weekendNight': 'Weekend nights (23:30–8)', 'preset.weekendNight.name': 'weekendnight',
    defaultWindow: 'default', windowDefaultName: 'night', appsTitle: 'App and category blocks', category: 'Category', blockCategory: 'Block all {cat}', appsIn: '{n} {cat} apps',
    thresholdsTitle: 'Alert thresholds (% left)', thresholdsHint: 'Comma separated, e.g. 50,30,10 (empty turns alerts off)', save: 'Save',
    membersTitle: 'Members', addMember: 'Add a member', name: 'Name', role: 'Role', add: 'Add', removeConfirm: 'Remove {name} from the family?',
    memberAdded: 'Added {name}. The login number is {id}, with the password you just set.', memberAddedNoPassword: 'Added {name}; the login number is {id}. No password was set, so {name} cannot log in yet: pick {name} in the controls and set one.',
    memberRemoved: 'Removed {name} from the family.', newPasswordHint: 'With a password, the new member logs in with the login number and it.',
    topupTitle: 'Top up', topupBtn: 'Add {bytes}', toppedUp: 'Added {bytes}',
    seeReceipt: 'View receipt', historyLink: 'Top-ups and gifts', historyTitle: 'Top-ups and gifts', historyMonth: 'Month', historyWho: 'Who',
    historyEveryone: 'The whole family', historyEmpty: 'No top-ups or gifts this month', histTopup: 'Added {bytes}', histTopupFree: 'Added {bytes} (service centre, free)',
    histGift: '{from} → {to}: {bytes} gift', histPrice: '₩{price}', histBy: 'by {name}', historyTotals: 'Topped up {bytes} · ₩{price} · gifts {gifts}',
    historyTotalsMember: 'Topped up {bytes} · gifts {gifts}', receiptTitle: 'Receipt', receiptOffer: 'Offer', receiptSupply: 'Price before VAT', receiptVat: 'VAT ({rate}%)',
    receiptTotal: 'Total', receiptBilling: 'Billing', 'billing.PHONE_BILL': 'Added to the phone bill', 'billing.FREE': 'Free (added by the service centre)',
    receiptBuyer: 'Bought by', receiptAt: 'When', receiptFamily: 'Family', receiptMonth: 'For the month', receiptBack: 'Back to the history', receiptMonthValue: '{m}/{y}',
    topupVat: 'VAT ₩{vat} included', giftCanGive: 'Can give: {bytes}', giftRulesHint: 'In steps of {step}, at most {max} at a time · keep at least {floor} after it',
    giftTimesLeft: '{n} more gifts this month', giftMinorNote: 'Minors can only receive data gifts.', giftNoneLeft: 'Nothing more to give this month',
    'giftRule.LEFT': 'Not enough left this month: at most {limit} can be given.',
    'giftRule.FLOOR': 'Some data must stay for this month after a gift: at most {limit} can be given.',
    'giftRule.SHARE': 'At most {pct}% of the monthly limit can be given in a month: {limit} more this month.',
    'giftRule.STEP': 'Gifts go in steps of {limit}.', 'giftRule.MAX': 'At most {limit} per gift.',
    'giftRule.GIVEN_PER_MONTH': 'All {limit} gifts of this month are sent. More from the 1st of next month.',
    'giftRule.RECEIVED_PER_MONTH': 'The receiver got all {limit} gifts of this month.',
    'giftRule.RECEIVED_MAX': 'The receiver can get only {limit} more this month.',
    'giftRule.MINOR': 'Minors cannot give gifts; they can receive them.',
    'giftRule.GIVER_NO_LIMIT': 'A member without a monthly limit has no data of its own to give. Set a monthly limit first.',
    'giftRule.RECEIVER_NO_LIMIT': 'The receiver has no monthly limit: it can use the family data as it is.',
    minorLabel: 'Minor (only receives gifts)', 'grant.TOPUP.offer': 'Top up the family pool ({bytes}, ₩{price})',
    alwaysAllowedApps: 'Apps allowed during downtime', alwaysAllowedAppsHelp: 'These apps keep working in blocked windows (e.g. a school app, maps).',
    'field.offerId': 'The offer', 'err.offer': "Choose one of the carrier's top-up offers.",
    settingsTitle: 'Settings', language: 'Language', pushTitle: 'Push notifications', pushOn: 'Turn on push', pushOff: 'Turn off push',
    pushUnsupported: 'This browser does not support push notifications', pushEnabled: 'Push notifications on', pushDisabled: 'Push notifications off',
    pushFailed: 'Push setup failed: {msg}', account: 'Account', signedInAs: '{name} ({role}) · family {family}',
    'cat.VIDEO': 'Video', 'cat.GAME': 'Games', 'cat.SOCIAL': 'Social', 'cat.MESSAGING': 'Messaging', 'cat.WEB': 'Web', 'cat.MUSIC': 'Music', 'cat.OTHER': 'Other',
    'day.MON': 'Mon', 'day.TUE': 'Tue', 'day.WED': 'Wed', 'day.THU': 'Thu', 'day.FRI': 'Fri', 'day.SAT': 'Sat', 'day.SUN': 'Sun',
    error: 'Error: {msg}', loading: 'Loading…', retrying: 'This screen loads again by itself once the connection is back.',
    'err.network': 'Cannot reach the server. Check the connection and try again in a moment.',
    'err.session': 'Your session ended. Please log in again.', 'err.forbidden': 'Only a parent can do this.',
    'err.notFound': 'Not found. It may have been removed already.', 'err.conflict': 'Another parent changed this first. Reload and try again.',
    'err.tooLarge': 'What you sent is too large.', 'err.tooMany': 'Too many requests. Try again in {wait}.',
    'err.unavailable': 'This cannot be done right now. Try again in a moment.', 'err.server': 'Something went wrong on the server. Try again in a moment.',
    'err.seconds': '{n} s', 'err.minutes': '{n} min', 'err.thresholds': 'Alert levels are numbers from 1 to 99, separated by commas.',
    'err.max': '{field} can be at most {max}.', 'err.min': '{field} must be at least {min}.',
    'err.long': '{field} can be at most {n} characters.', 'err.required': 'Please fill in {field}.',
    'err.chars': '{field} contains characters that cannot be used.', 'err.invalid': 'Please check {field}.',
    'field.bytes': 'The amount', 'field.amountBytes': 'The amount', 'field.name': 'The name', 'field.message': 'The message', 'field.reason': 'The reason',
    'field.thresholds': 'The alert levels', 'field.start': 'The start time', 'field.end': 'The end time', 'field.days': 'The days', 'field.role': 'The role',
    'field.phone': 'The phone number', 'field.value': 'The value', bytesLabel: 'bytes', ownersOnly: 'Owners only',
    newNote: 'New: {title}',
    loginBad: 'Wrong member number or password. {n} more tries and the login is locked.',
    loginNowLocked: 'Too many wrong tries: the login is locked for {min} min.', loginLocked: 'The login is locked. Try again in {min} min.',
    lockedHelp: "Forgot the password? A parent can reset it at once in the controls (a parent's own is reset by the service centre).",
    'ended.EXPIRED': 'You were logged out after a long time away. Please log in again.',
    'ended.PASSWORD': 'Your password was changed, so you were logged out. Log in with the new one; ask a parent if you do not know it.',
    'ended.REMOVED': 'You were removed from the family, so you were logged out.',
    'ended.REVOKED': 'You were logged out elsewhere. Please log in again.',
    'ended.SESSION': 'Your session ended. Please log in again.',
    pwTitle: 'Change my password', pwCurrent: 'Current password', pwNew: 'New password', pwAgain: 'New password again', pwChange: 'Change password',
    pwHint: 'At least 8 characters. Common passwords and your member number, phone or name are refused. A few unrelated words work well.',
    pwChanged: 'Password changed. Your other devices are logged out.', pwMismatch: 'The two new passwords differ.',
    pwWeak: 'Your password is too easy to guess. Please choose a new one.',
    'pw.short': 'Use at least 8 characters.', 'pw.long': 'Too long (at most 72 bytes: 72 Latin letters, 24 Korean syllables).',
    'pw.common': 'Too common or easy to guess: choose another.',
    'pw.context': 'Your member number, phone or name cannot be a password.', 'pw.wrongCurrent': 'The current password is wrong.',
    'pw.locked': 'Too many wrong tries: locked for a while. Try again in {min} min.',
    resetTitle: 'Reset password', resetFor: "{name}'s new password", resetBtn: 'Reset',
    resetDone: "{name}'s password is changed; {name} is logged out on every device.",
  },
};

const KEY = 'dpcs.lang';
export let lang = localStorage.getItem(KEY) === 'en' ? 'en' : 'ko';

export function setLang(l) {
  lang = l === 'en' ? 'en' : 'ko';
  localStorage.setItem(KEY, lang);
  document.documentElement.lang = lang;
}

// Korean particles after a filled-in word: a text writes the pair, e.g.
// "{field}을(를)", and t picks the one the word takes by its last sound —
// 을/은/이/과/으로 after a final consonant, 를/는/가/와/로 after a vowel
// (로 after ㄹ too). A word ending in a digit or in capitals is read as
// Korean reads it ("1" 일, "MB" 비, "M" 엠); one t cannot read (a word in
// Latin letters, "TikTok") keeps the pair.
const PARTICLES = { '은(는)': ['은', '는'], '을(를)': ['을', '를'], '이(가)': ['이', '가'], '과(와)': ['과', '와'], '(으)로': ['으로', '로'] };
const DIGIT_FINAL = [21, 8, 0, 16, 0, 0, 1, 8, 8, 0]; // 영 일 이 삼 사 오 육 칠 팔 구
const LETTER_FINAL = { l: 8, m: 16, n: 4, r: 8 }; // 엘 엠 엔 알; other capitals end in a vowel

// finalSound is the index of the final consonant of word's last sound
// (0: none, 8: ㄹ), or -1 when it cannot be read.
export function finalSound(word) {
  const c = String(word).trim().slice(-1);
  if (!c) return -1;
  const code = c.charCodeAt(0);
  if (code >= 0xac00 && code <= 0xd7a3) return (code - 0xac00) % 28;
  if (c >= '0' && c <= '9') return DIGIT_FINAL[c.charCodeAt(0) - 48];
  if (/[A-Z]/.test(c)) return LETTER_FINAL[c.toLowerCase()] ?? 0;
  return -1;
}

function particle(word, pair) {
  const f = finalSound(word);
  if (f < 0) return pair;
  const [after, afterVowel] = PARTICLES[pair];
  return pair === '(으)로' ? (f === 0 || f === 8 ? afterVowel : after) : (f === 0 ? afterVowel : after);
}

const FILL = /\{(\w+)\}([”"’']?)(은\(는\)|을\(를\)|이\(가\)|과\(와\)|\(으\)로)?/g;

export function t(key, vars) {
  let s = table[lang][key] ?? table.ko[key] ?? key;
  if (vars) {
    s = s.replace(FILL, (m, k, quote, pair) => {
      if (!(k in vars)) return m;
      const v = String(vars[k]);
      return v + quote + (pair ? particle(v, pair) : '');
    });
  }
  return s;
}

// appName is how an app of the catalog (GET /catalog) is shown: its name
// in the viewer's language, never its package id (an app the catalog does
// not know is "알 수 없는 앱").
export function appName(app) {
  if (!app) return t('unknownApp');
  return (lang === 'en' ? app.nameEn : app.name) || app.name || t('unknownApp');
}

export function locale() { return lang === 'en' ? 'en-US' : 'ko-KR'; }
