package arbiter

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	pb "github.com/overworld-p2p/overworld/game/arbiter/arbiterpb"
)

// maxWireTS bounds ts on the wire: no view holds more than MaxMembersLimit.
const maxWireTS = MaxMembersLimit * RangeSize

// maxWireSeq bounds grant sequence numbers on the wire, far below overflow.
const maxWireSeq = 1 << 62

// Decode parses one message and checks everything that can be checked
// without the receiver's state: size, presence of the fields its kind
// needs, list lengths, IDs, teams, text. It allocates only after the size
// check.
func Decode(b []byte) (*pb.Envelope, error) {
	if len(b) > MaxMessageBytes {
		return nil, fmt.Errorf("arbiter message of %d bytes: limit %d", len(b), MaxMessageBytes)
	}
	var env pb.Envelope
	if err := proto.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("decode arbiter message: %w", err)
	}
	if err := checkEnvelope(&env); err != nil {
		return nil, fmt.Errorf("arbiter %s: %w", kindName(&env), err)
	}
	return &env, nil
}

func checkEnvelope(env *pb.Envelope) error {
	if env.Body == nil {
		return errors.New("no body")
	}
	if _, join := env.Body.(*pb.Envelope_Join); join {
		if j := env.GetJoin(); j.GetNonce() == 0 {
			return errors.New("nonce 0")
		}
		if env.GetSender() != 0 {
			return fmt.Errorf("sender %d: a joiner has no ID yet", env.GetSender())
		}
		return nil
	}
	if env.GetSender() == 0 {
		return errors.New("sender 0")
	}
	if env.GetGame() == 0 {
		return errors.New("game 0")
	}
	if err := checkStamp(env.GetStamp()); err != nil {
		return err
	}
	for _, seq := range []uint64{
		env.GetAdmit().GetGrantSeq(), env.GetView().GetGrantSeq(), env.GetView().GetSkipTo(),
		env.GetHandoff().GetGrantSeq(), env.GetPing().GetGrantSeq(), env.GetPong().GetGrantSeq(),
	} {
		if seq >= maxWireSeq {
			return fmt.Errorf("grant sequence %d beyond %d", seq, uint64(maxWireSeq))
		}
	}
	switch b := env.Body.(type) {
	case *pb.Envelope_Admit:
		a := b.Admit
		if a.GetNonce() == 0 || a.GetId() == 0 || a.GetTeam() == 0 {
			return fmt.Errorf("nonce %d, id %d, team %d: none may be 0", a.GetNonce(), a.GetId(), a.GetTeam())
		}
		if err := checkView(a.GetView()); err != nil {
			return err
		}
		return checkStamp(a.GetNext())
	case *pb.Envelope_Full:
		if b.Full.GetNonce() == 0 {
			return errors.New("nonce 0")
		}
		if r := b.Full.GetReason(); r != pb.Full_GAME_FULL && r != pb.Full_ID_TAKEN {
			return fmt.Errorf("reason %d", r)
		}
	case *pb.Envelope_View:
		v := b.View
		if r := v.GetReason(); r < pb.ViewChange_LEFT || r > pb.ViewChange_TAKEOVER {
			return fmt.Errorf("reason %d", r)
		}
		if v.GetSkipTo() != 0 && v.GetSkipTo() < v.GetGrantSeq() {
			return fmt.Errorf("skip to %d below grant %d", v.GetSkipTo(), v.GetGrantSeq())
		}
		if err := checkView(v.GetView()); err != nil {
			return err
		}
		return checkStamp(v.GetNext())
	case *pb.Envelope_Handoff:
		h := b.Handoff
		if h.GetTo() == 0 {
			return errors.New("to 0")
		}
		if n := len(h.GetDutyState()); n > MaxDutyState {
			return fmt.Errorf("duty state of %d bytes: limit %d", n, MaxDutyState)
		}
		if n := len(h.GetQueue()); n > MaxHandedClaims {
			return fmt.Errorf("%d claims handed over: limit %d", n, MaxHandedClaims)
		}
		for _, q := range h.GetQueue() {
			if q.GetMember() == 0 {
				return errors.New("a claim handed over without its member")
			}
		}
		return checkStamp(h.GetNext())
	case *pb.Envelope_Ack:
		if b.Ack.GetFrom() == 0 {
			return errors.New("from 0")
		}
	case *pb.Envelope_Ping:
		p := b.Ping
		if p.GetSeq() == 0 {
			return errors.New("seq 0")
		}
		if p.GetGrantHave() > p.GetGrantSeq() || p.GetDigestFrom() > p.GetGrantHave() {
			return fmt.Errorf("grants: has %d of %d, digest from %d", p.GetGrantHave(), p.GetGrantSeq(), p.GetDigestFrom())
		}
		return checkRange("repair", p.GetRepairFrom(), p.GetRepairTo(), p.GetGrantHave(), p.GetRepairs())
	case *pb.Envelope_Pong:
		p := b.Pong
		if p.GetTo() == 0 || p.GetSeq() == 0 {
			return fmt.Errorf("to %d, seq %d: neither may be 0", p.GetTo(), p.GetSeq())
		}
		if p.GetGrantHave() > p.GetGrantSeq() {
			return fmt.Errorf("grants: has %d of %d", p.GetGrantHave(), p.GetGrantSeq())
		}
		return checkRange("carry", p.GetCarryFrom(), p.GetCarryTo(), p.GetGrantHave(), p.GetGrants())
	case *pb.Envelope_Grant:
		return checkGrants([]*pb.GrantEntry{b.Grant.GetEntry()})
	case *pb.Envelope_Deny:
		if b.Deny.GetTo() == 0 || b.Deny.GetHolder() == 0 {
			return fmt.Errorf("to %d, holder %d: neither may be 0", b.Deny.GetTo(), b.Deny.GetHolder())
		}
	case *pb.Envelope_Chat:
		t := b.Chat.GetText()
		if len(t) > MaxChatBytes {
			return fmt.Errorf("text of %d bytes: limit %d", len(t), MaxChatBytes)
		}
		if !utf8.ValidString(t) {
			return errors.New("text is not UTF-8")
		}
	case *pb.Envelope_Leave, *pb.Envelope_ViewRequest, *pb.Envelope_Claim:
	default:
		return errors.New("unknown body")
	}
	return nil
}

func checkStamp(s *pb.Stamp) error {
	if s == nil {
		return errors.New("no stamp")
	}
	if s.GetEpoch()>>32 == 0 {
		return errors.New("epoch 0")
	}
	if s.GetTs() >= maxWireTS {
		return fmt.Errorf("ts %d beyond any lap (%d)", s.GetTs(), maxWireTS)
	}
	return nil
}

func checkView(v *pb.View) error {
	if v == nil {
		return errors.New("no view")
	}
	ms := v.GetMembers()
	if len(ms) == 0 || len(ms) > MaxMembersLimit {
		return fmt.Errorf("view of %d members outside [1, %d]", len(ms), MaxMembersLimit)
	}
	if v.GetEpoch()>>32 == 0 {
		return errors.New("view epoch 0")
	}
	for i, m := range ms {
		if m.GetId() == 0 || m.GetTeam() == 0 || m.GetTeam() > MaxMembersLimit {
			return fmt.Errorf("view member %d: id %d team %d", i, m.GetId(), m.GetTeam())
		}
		for _, o := range ms[:i] {
			if o.GetId() == m.GetId() {
				return fmt.Errorf("view lists member %d twice", m.GetId())
			}
		}
	}
	return nil
}

// checkRange checks grants sent as everything the sender holds in
// (from, to], to within what it holds completely (have).
func checkRange(what string, from, to, have uint64, gs []*pb.GrantEntry) error {
	if len(gs) > 0 && to == 0 {
		return fmt.Errorf("%d %s grants without a range", len(gs), what)
	}
	if to != 0 && (to <= from || to > have) {
		return fmt.Errorf("%s range (%d, %d] outside (0, %d]", what, from, to, have)
	}
	if err := checkGrants(gs); err != nil {
		return err
	}
	prev := from
	for _, g := range gs {
		if g.GetSeq() <= prev || g.GetSeq() > to {
			return fmt.Errorf("%s grant %d out of order or outside (%d, %d]", what, g.GetSeq(), from, to)
		}
		prev = g.GetSeq()
	}
	return nil
}

func checkGrants(gs []*pb.GrantEntry) error {
	if len(gs) > MaxRepairs {
		return fmt.Errorf("%d grants: limit %d", len(gs), MaxRepairs)
	}
	for _, g := range gs {
		if g == nil || g.GetSeq() == 0 || g.GetSeq() >= maxWireSeq || g.GetTo() == 0 {
			return errors.New("grant without a valid seq or holder")
		}
		if err := checkStamp(g.GetStamp()); err != nil {
			return fmt.Errorf("grant %d: %w", g.GetSeq(), err)
		}
	}
	return nil
}

func stampOf(s *pb.Stamp) Stamp {
	return Stamp{Epoch: s.GetEpoch(), Lap: s.GetLap(), TS: s.GetTs()}
}

func (s Stamp) wire() *pb.Stamp { return &pb.Stamp{Epoch: s.Epoch, Lap: s.Lap, Ts: s.TS} }

var marshal = proto.MarshalOptions{Deterministic: true}

// encode marshals a message the node built; it is within bounds by
// construction, so a failure is a bug.
func encode(env *pb.Envelope) []byte {
	b, err := marshal.Marshal(env)
	if err != nil {
		panic(fmt.Sprintf("arbiter: encoding own %s: %v", kindName(env), err))
	}
	if len(b) > MaxMessageBytes {
		panic(fmt.Sprintf("arbiter: own %s is %d bytes, over %d", kindName(env), len(b), MaxMessageBytes))
	}
	return b
}

func kindName(env *pb.Envelope) string {
	switch env.Body.(type) {
	case *pb.Envelope_Join:
		return "JOIN"
	case *pb.Envelope_Admit:
		return "ADMIT"
	case *pb.Envelope_Full:
		return "FULL"
	case *pb.Envelope_Leave:
		return "LEAVE"
	case *pb.Envelope_View:
		return "VIEW"
	case *pb.Envelope_ViewRequest:
		return "VIEW?"
	case *pb.Envelope_Handoff:
		return "HANDOFF"
	case *pb.Envelope_Ack:
		return "ACK"
	case *pb.Envelope_Ping:
		return "PING"
	case *pb.Envelope_Pong:
		return "PONG"
	case *pb.Envelope_Claim:
		return "CLAIM"
	case *pb.Envelope_Grant:
		return "GRANT"
	case *pb.Envelope_Deny:
		return "DENY"
	case *pb.Envelope_Chat:
		return "CHAT"
	}
	return "EMPTY"
}

// FormatMessage renders a message on one line for logs and golden files.
func FormatMessage(b []byte) string {
	env, err := Decode(b)
	if err != nil {
		return fmt.Sprintf("undecodable (%d bytes)", len(b))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s", kindName(env))
	if env.Stamp != nil {
		fmt.Fprintf(&sb, " %s", stampOf(env.Stamp))
	}
	view := func(v *pb.View) string {
		parts := make([]string, len(v.GetMembers()))
		for i, m := range v.GetMembers() {
			parts[i] = fmt.Sprintf("%d:t%d", m.GetId(), m.GetTeam())
		}
		return fmt.Sprintf("e%s[%s]", epochString(v.GetEpoch()), strings.Join(parts, " "))
	}
	grants := func(gs []*pb.GrantEntry) string {
		parts := make([]string, len(gs))
		for i, g := range gs {
			parts[i] = fmt.Sprintf("#%d:r%d→%d", g.GetSeq(), g.GetResource(), g.GetTo())
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	switch b := env.Body.(type) {
	case *pb.Envelope_Join:
		fmt.Fprintf(&sb, " id=%d team=%d waited=%dms", b.Join.GetId(), b.Join.GetTeam(), b.Join.GetWaitedMs())
	case *pb.Envelope_Admit:
		a := b.Admit
		fmt.Fprintf(&sb, " id=%d team=%d forced=%t view=%s next=%s grants=%d",
			a.GetId(), a.GetTeam(), a.GetForced(), view(a.GetView()), stampOf(a.GetNext()), a.GetGrantSeq())
	case *pb.Envelope_Full:
		fmt.Fprintf(&sb, " reason=%s", b.Full.GetReason())
	case *pb.Envelope_View:
		v := b.View
		fmt.Fprintf(&sb, " %s subject=%d view=%s next=%s", v.GetReason(), v.GetSubject(), view(v.GetView()), stampOf(v.GetNext()))
	case *pb.Envelope_Handoff:
		h := b.Handoff
		fmt.Fprintf(&sb, " to=%d next=%s grants=%d state=%q", h.GetTo(), stampOf(h.GetNext()), h.GetGrantSeq(), h.GetDutyState())
		if q := h.GetQueue(); len(q) > 0 {
			parts := make([]string, len(q))
			for i, c := range q {
				parts[i] = fmt.Sprintf("%d:r%d", c.GetMember(), c.GetResource())
			}
			fmt.Fprintf(&sb, " queue=[%s]", strings.Join(parts, " "))
		}
	case *pb.Envelope_Ack:
		fmt.Fprintf(&sb, " from=%d", b.Ack.GetFrom())
	case *pb.Envelope_Ping:
		p := b.Ping
		fmt.Fprintf(&sb, " seq=%d grants=%d/%d", p.GetSeq(), p.GetGrantHave(), p.GetGrantSeq())
		if len(p.GetRepairs()) > 0 {
			fmt.Fprintf(&sb, " repairs=%s", grants(p.GetRepairs()))
		}
	case *pb.Envelope_Pong:
		p := b.Pong
		fmt.Fprintf(&sb, " to=%d seq=%d grants=%d/%d", p.GetTo(), p.GetSeq(), p.GetGrantHave(), p.GetGrantSeq())
		if len(p.GetGrants()) > 0 {
			fmt.Fprintf(&sb, " carry=%s", grants(p.GetGrants()))
		}
	case *pb.Envelope_Claim:
		fmt.Fprintf(&sb, " r%d", b.Claim.GetResource())
	case *pb.Envelope_Grant:
		g := b.Grant.GetEntry()
		fmt.Fprintf(&sb, " #%d r%d to=%d", g.GetSeq(), g.GetResource(), g.GetTo())
	case *pb.Envelope_Deny:
		fmt.Fprintf(&sb, " r%d to=%d holder=%d", b.Deny.GetResource(), b.Deny.GetTo(), b.Deny.GetHolder())
	case *pb.Envelope_Chat:
		scope := "all"
		if b.Chat.GetTeam() {
			scope = "team"
		}
		fmt.Fprintf(&sb, " %s %q", scope, b.Chat.GetText())
	}
	return sb.String()
}
