package plan

import (
	"fmt"
	"time"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// Container-side repair: a macvlan or ipvlan link dies with its parent, the
// interface inside each running container with it. A joined endpoint whose
// interface was read in its container (record.Plumb) stands on the parent
// of the index it recorded; a link of the parent's name with another index
// is that parent deleted and made again, without the container's
// interface, which is then made again there (OpContainer). A parent that
// stays missing is waited for, up to a bound; past it the containers are
// left as they are, and said so once (OpAbandon).

// Plumbed is a joined endpoint whose interface in its container was read,
// with its network.
type Plumbed struct {
	Network  record.Network
	Endpoint record.Endpoint
}

// Lost is what the repair remembers of an endpoint whose interface is
// gone: since when its parent was seen missing (zero: not seen missing,
// it came back at once), whether it was given up, and the parent it could
// not be made on (Failed: Attempt of that parent), tried again only on a
// parent that changed.
type Lost struct {
	Since  time.Time
	GaveUp bool
	Failed string
}

// Attempt names a parent link as it was when an interface was to be made
// on it: a change of any of these is worth another try.
func Attempt(l kernel.Link) string {
	return fmt.Sprintf("%d/%s/%d/%s", l.Index, l.Kind, l.MTU, l.Encap)
}

// ContainerPlan is what a repair pass does for containers' interfaces.
type ContainerPlan struct {
	// Steps are OpContainer (the parent is back: make the interface
	// again, or report Problem) and OpAbandon (waited past the bound).
	Steps []Step
	// Remember is what the next pass must know (lost, as it stands after
	// this one, before the steps' results): the endpoints given up, the
	// ones whose parent is missing within the bound (Since: now for the
	// ones seen first), the ones that failed on the parent as it is.
	Remember map[string]Lost
	// Next is when the first of the missing is given up (zero: none).
	Next time.Time
	// Parents are the links the joined endpoints stand on, by name: the
	// link events worth a pass.
	Parents map[string]bool
}

// PlanContainers decides, for every joined endpoint of this boot whose
// interface was read, whether its interface must be made again, waited
// for or given up, from the host's links and what earlier passes
// remembered (lost, by endpoint ID).
func PlanContainers(eps []Plumbed, links []kernel.Link, lost map[string]Lost, boot string, now time.Time, wait time.Duration) ContainerPlan {
	out := ContainerPlan{Remember: map[string]Lost{}, Parents: map[string]bool{}}
	for _, pe := range eps {
		ep, n := pe.Endpoint, pe.Network
		if ep.Plumb == nil || ep.Sandbox == "" || ep.Boot != boot || n.Pending != nil {
			continue
		}
		out.Parents[n.Parent] = true
		was := lost[ep.ID]
		if was.GaveUp {
			out.Remember[ep.ID] = was
			continue
		}
		p, ok := FindLink(links, n.Parent)
		if _, alive := LinkByIndex(links, ep.Plumb.ParentIndex); alive && (!ok || p.Index != ep.Plumb.ParentIndex) {
			continue // the link it stands on is there under another name (renamed): nothing went
		}
		switch {
		case !ok:
			since := was.Since
			if since.IsZero() {
				since = now
			}
			if deadline := since.Add(wait); !now.Before(deadline) {
				out.Steps = append(out.Steps, Step{Op: OpAbandon, Name: ep.ID, Container: &pe,
					Why: fmt.Sprintf("its parent link %s has been missing for %s", n.Parent, now.Sub(since).Round(time.Second))})
			} else {
				out.Remember[ep.ID] = Lost{Since: since}
				if out.Next.IsZero() || deadline.Before(out.Next) {
					out.Next = deadline
				}
			}
		case p.Index == ep.Plumb.ParentIndex:
			// Its interface stands on this very link.
		case was.Failed == Attempt(p):
			// Tried on this parent as it is: wait for it to change.
			out.Remember[ep.ID] = was
		default:
			st := Step{Op: OpContainer, Name: ep.ID, Container: &pe, Link: p,
				Why: fmt.Sprintf("its parent link %s was made again (index %d, was %d)", n.Parent, p.Index, ep.Plumb.ParentIndex)}
			switch {
			case !p.Ethernet():
				st.Problem = fmt.Sprintf("parent link %s came back as a %s link without Ethernet (%s): a %s link cannot stand on it; make %s an Ethernet link again, or restart the container on another network",
					p.Name, p.Kind, p.Encap, n.Type, n.Parent)
			case ep.Plumb.MTU > p.MTU:
				st.Problem = fmt.Sprintf("parent link %s came back with MTU %d, below the container's interface's %d: set it back (ip link set dev %s mtu %d), or restart the container",
					p.Name, p.MTU, ep.Plumb.MTU, p.Name, ep.Plumb.MTU)
			}
			out.Steps = append(out.Steps, st)
		}
	}
	return out
}
